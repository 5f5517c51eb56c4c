"""Adaptive batching: pack zones into tasks of about ``target_task_seconds`` of work (pure, no Ray).

Why: a Ray task costs a few milliseconds, a small model's fit about one, so one task per small zone
spends most of the machine on overhead; a large model's fit is long enough to be a task on its own.

How:

* zones are handed out largest first (long zones start early, short ones fill the tail);
* until the first task reports, tasks carry ``probe_zones`` zones, to measure the cost quickly (the
  scheduler sends one such probe per CPU slot, not ``max_in_flight``);
* then the cost per row is learned from finished tasks' in-task time (fits *and* per-zone overhead
  such as model writes; the median of the last 64 tasks, so that a worker's one-off warm-up does not
  skew it), and a task takes zones until their estimated cost reaches the goal;
* the goal shrinks towards the end (guided self-scheduling: remaining work / (2 x slots), never
  below ``min_task_seconds``), so the last tasks are short and every slot finishes at about the same time;
* zones of a task that died or overran are requeued one per task (isolated), ahead of the rest;
  the other zones of a task killed for one zone past ``zone_timeout_s`` are requeued as they were
  (batched), ahead of the rest.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from airflow_ray_provider.workloads.zone_training.config import BatchingConfig


@dataclass(frozen=True)
class ZoneItem:
    """A zone waiting to be trained."""

    key: str
    rows: int


class AdaptiveBatcher:
    """Hands out batches of zones sized by measured cost.

    :param zones: every zone to train.
    :param slots: tasks that can run at once (cluster CPUs / CPUs per zone).
    :param config: the batching settings.
    """

    def __init__(self, zones: Iterable[ZoneItem], slots: int, config: BatchingConfig) -> None:
        self._queue = deque(sorted(zones, key=lambda z: (-z.rows, z.key)))
        self._isolated: deque[ZoneItem] = deque()
        self._slots = max(1, slots)
        self._cfg = config
        self._rows_pending = sum(z.rows for z in self._queue)
        self._rates: deque[float] = deque(maxlen=64)

    @property
    def pending(self) -> int:
        """Zones not yet handed out."""
        return len(self._queue) + len(self._isolated)

    @property
    def seconds_per_row(self) -> float | None:
        """Learned cost of one row, or ``None`` before any task reported."""
        if not self._rates:
            return None
        return statistics.median(self._rates)

    def next_batch(self) -> list[ZoneItem]:
        """The next task's zones (empty when nothing is pending)."""
        if self._isolated:
            return [self._isolated.popleft()]
        if not self._queue:
            return []
        goal = self.task_goal_seconds()
        limit = min(self._cfg.max_zones_per_task, self._size_goal_zones())
        batch = [self._pop()]
        cost = self._estimate(batch[0])
        while self._queue and len(batch) < limit:
            nxt = self._estimate(self._queue[0])
            if goal is not None and cost + nxt > goal * (1 + 1e-9):
                break
            batch.append(self._pop())
            cost += nxt
        return batch

    def task_goal_seconds(self) -> float | None:
        """Seconds of work the next task should carry (``None`` while still probing)."""
        per_row = self.seconds_per_row
        if per_row is None:
            return None
        remaining = per_row * self._rows_pending
        tail_goal = remaining / (2 * self._slots)
        return max(self._cfg.min_task_seconds, min(self._cfg.target_task_seconds, tail_goal))

    def record(self, *, rows: int, seconds: float, zones: int) -> None:
        """Learn from a finished task: its rows, its in-task seconds, its zone count."""
        if zones > 0:
            self._rates.append(max(seconds, 0.0) / max(rows, zones))

    def isolate(self, keys_rows: Iterable[ZoneItem]) -> None:
        """Requeue zones to run one per task, before anything else."""
        self._isolated.extend(keys_rows)

    def requeue(self, items: Iterable[ZoneItem]) -> None:
        """Put zones back at the front of the queue, batched as usual (in the order given)."""
        for item in reversed(list(items)):
            self._queue.appendleft(item)
            self._rows_pending += item.rows

    def _pop(self) -> ZoneItem:
        item = self._queue.popleft()
        self._rows_pending -= item.rows
        return item

    def _estimate(self, item: ZoneItem) -> float:
        per_row = self.seconds_per_row or 0.0
        return per_row * max(item.rows, 1)

    def _size_goal_zones(self) -> int:
        return self._cfg.probe_zones if self.seconds_per_row is None else self._cfg.max_zones_per_task

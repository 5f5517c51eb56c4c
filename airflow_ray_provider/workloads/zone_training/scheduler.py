"""The driver loop: keep a bounded number of batch tasks in flight and collect them as they finish.

The loop is the same for both engines (:mod:`.engine`); a :class:`TaskRunner` runs the tasks: Ray tasks
(:mod:`.ray_tasks`) or worker processes on this machine (:mod:`.process_pool`). Never one wait per
zone: the loop waits for any one task, takes only that task's small result rows, tops the in-flight
set up again and logs progress. With at most ``max_in_flight`` tasks submitted, driver memory stays
flat for any number of zones.

Failures: a zone that raises is a failed row returned by its task. A zone past ``zone_timeout_s`` is
failed by the driver once the runner has killed its task's worker (:mod:`.timeouts`); the task's other
zones go back to the queue. A task that dies (worker crash, node loss after ``max_retries`` Ray
retries, OOM kill) or overruns its backstop deadline is killed and its zones rerun one per task, so
one bad zone cannot take its batch-mates down; a single-zone task that dies again is recorded as
failed with the runner's error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from airflow_ray_provider.workloads.common.progress import Progress
from airflow_ray_provider.workloads.zone_training.batching import AdaptiveBatcher, ZoneItem
from airflow_ray_provider.workloads.zone_training.manifest import manifest_row
from airflow_ray_provider.workloads.zone_training.worker import ZoneWork

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig
    from airflow_ray_provider.workloads.zone_training.dataset import DatasetPlan
    from airflow_ray_provider.workloads.zone_training.staging import StagedData

log = logging.getLogger(__name__)

# Backstop for zone_timeout_s (see .backstop): a task is killed once it has run for twice its
# zones' time limits plus this grace, then its zones rerun one per task.
BACKSTOP_GRACE_S = 30.0
_WAIT_S = 0.5


class TaskRunner(Protocol):
    """Runs batch tasks (:func:`~.worker.run_batch` on a batch) for :class:`ZoneScheduler`."""

    def submit(self, key: int, works: list[ZoneWork], chunks: list[Any]) -> Any:
        """Start (or queue) task ``key``; returns its handle."""

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | str]]:
        """Finished tasks: ``(handle, run_batch's result)``, or ``(handle, why it was lost)``."""

    def expired(self) -> list[tuple[Any, int | None]]:
        """Tasks killed now: ``(handle, index in its batch of the zone past zone_timeout_s)``, or
        ``(handle, None)`` for a task past its backstop (:func:`.backstop.backstop_seconds`)."""

    def close(self) -> None:
        """Stop what the runner started (tasks still running are killed)."""


@dataclass
class _Flight:
    key: int
    zones: list[ZoneItem]


class ZoneSources:
    """Turns zone keys into :class:`ZoneWork` items and the chunk objects their task needs."""

    def __init__(self, plan: DatasetPlan, staged: StagedData | None, attempts: dict[str, int]) -> None:
        self._plan = plan
        self._staged = staged
        self._attempts = attempts

    def works(self, batch: list[ZoneItem]) -> tuple[list[ZoneWork], list[Any]]:
        """The batch's work items and, for staged data, the chunk refs to pass as task arguments."""
        if self._staged is None:
            files = self._plan.zone_files or {}
            return [self._work(z, tuple(files.get(z.key, ()))) for z in batch], []
        zone_pieces = [self._staged.pieces.get(zone.key, []) for zone in batch]
        # Chunk arguments in chunk order: a task's chunks are listed the same way whichever zones it has
        # (the Ray runner passes them inside a list, so they do not split its tasks' scheduling keys).
        chunks = sorted({chunk for pieces in zone_pieces for chunk, _, _ in pieces})
        arg_of = {chunk: arg for arg, chunk in enumerate(chunks)}
        works = [
            self._work(zone, tuple((arg_of[chunk], start, rows) for chunk, start, rows in pieces))
            for zone, pieces in zip(batch, zone_pieces, strict=True)
        ]
        return works, [self._staged.chunk_refs[chunk] for chunk in chunks]

    def attempt(self, key: str) -> int:
        """The manifest attempt number of ``key`` in this run."""
        return self._attempts.get(key, 1)

    def _work(self, zone: ZoneItem, pieces: tuple[Any, ...]) -> ZoneWork:
        return ZoneWork(zone.key, zone.rows, pieces, self.attempt(zone.key))


class ZoneScheduler:
    """Runs every zone through batch tasks; :meth:`run` returns one result row per zone."""

    def __init__(
        self,
        *,
        cfg: ZoneTrainingConfig,
        runner: TaskRunner,
        sources: ZoneSources,
        batcher: AdaptiveBatcher,
        slots: int,
    ) -> None:
        self._runner = runner
        self._cfg = cfg
        self._sources = sources
        self._batcher = batcher
        self._slots = max(1, slots)
        self._max_in_flight = cfg.batching.max_in_flight or 3 * self._slots
        self._in_flight: dict[Any, _Flight] = {}
        self._next_key = 0
        self.results: list[dict[str, Any]] = []
        self.busy_s = 0.0  # sum of the collected tasks' own seconds (slot-seconds spent in tasks)
        self.busy_cpu_s = 0.0  # the workers' CPU seconds in those tasks
        self.tasks_done = 0
        self.progress = Progress(
            batcher.pending,
            "zones",
            cfg.progress_interval_s,
            logger=log,
            detail=self._progress_detail,
            show_outcomes=True,
        )

    def run(self) -> list[dict[str, Any]]:
        """Train every zone; return the result rows (one per zone)."""
        try:
            while self._batcher.pending or self._in_flight:
                self._fill()
                for handle, out in self._runner.wait(list(self._in_flight), _WAIT_S):
                    self._collect(self._in_flight.pop(handle), out)
                self._enforce_deadlines()
                self.progress.maybe_report()
        finally:
            self._runner.close()
        self.progress.report(final=True)
        return self.results

    def task_figures(self) -> dict[str, Any]:
        """The fan-out's task figures for the run summary: ``count``, ``slots``, ``busy_s``, ``busy_cpu_s``.

        ``busy_s / (slots x fan_out)`` is the share of the fan-out the slots spent in tasks rather than
        between them; ``busy_cpu_s / busy_s`` the share of the in-task time the workers had a core.
        """
        return {
            "count": self.tasks_done,
            "slots": self._slots,
            "busy_s": round(self.busy_s, 3),
            "busy_cpu_s": round(self.busy_cpu_s, 3),
        }

    def _progress_detail(self, final: bool) -> str:
        return progress_detail(
            self.tasks_done, len(self._in_flight), self._batcher.task_goal_seconds(), final
        )

    def _fill(self) -> None:
        while self._batcher.pending and len(self._in_flight) < self._in_flight_limit():
            batch = self._batcher.next_batch()
            works, chunk_refs = self._sources.works(batch)
            key, self._next_key = self._next_key, self._next_key + 1
            self._in_flight[self._runner.submit(key, works, chunk_refs)] = _Flight(key, batch)

    def _in_flight_limit(self) -> int:
        """One probe task per slot until the first task reports its cost, then ``max_in_flight``.

        More probes would only queue behind the first ones; each costs a task round trip (a few ms).
        """
        return self._max_in_flight if self._batcher.seconds_per_row is not None else self._slots

    def _collect(self, flight: _Flight, out: dict[str, Any] | str) -> None:
        if isinstance(out, str):
            self._task_lost(flight, out)
            return
        self._batcher.record(rows=out["rows"], seconds=out["task_s"], zones=len(flight.zones))
        self.busy_s += out["task_s"]
        self.busy_cpu_s += out.get("task_cpu_s", 0.0)
        self._add(out["results"])

    def _enforce_deadlines(self) -> None:
        limit = self._cfg.zone_timeout_s or 0.0
        for handle, index in self._runner.expired():
            flight = self._in_flight.pop(handle)
            if index is None or not 0 <= index < len(flight.zones):
                self._task_lost(
                    flight, f"timed out: its task ran past the zone_timeout_s ({limit:g}s) backstop"
                )
                continue
            zone = flight.zones[index]
            self._batcher.requeue(z for i, z in enumerate(flight.zones) if i != index)
            error = f"timed out after {limit:g}s (zone_timeout_s)"
            attempt = self._sources.attempt(zone.key)
            self._add(
                [
                    manifest_row(
                        zone.key, "failed", error=error, rows=zone.rows, attempt=attempt, duration_s=limit
                    )
                ]
            )

    def _task_lost(self, flight: _Flight, reason: str) -> None:
        if len(flight.zones) > 1:
            self._batcher.isolate(flight.zones)
            return
        zone = flight.zones[0]
        self._add(
            [
                manifest_row(
                    zone.key, "failed", error=reason, rows=zone.rows, attempt=self._sources.attempt(zone.key)
                )
            ]
        )

    def _add(self, rows: list[dict[str, Any]]) -> None:
        failed = sum(1 for r in rows if r["status"] != "succeeded")
        self.results.extend(rows)
        self.tasks_done += 1
        self.progress.add(len(rows), failed=failed)


def progress_detail(tasks_done: int, in_flight: int, goal_s: float | None, final: bool) -> str:
    """The scheduler's part of a progress line: tasks done and in flight, and the task size aimed at.

    The goal is what the batcher aims for next (``probing`` until the first tasks report their cost),
    so the closing line, with nothing left to batch, leaves it out.
    """
    text = f"{tasks_done} tasks done, {in_flight} in flight"
    if final:
        return text
    return f"{text}, task goal {'probing' if goal_s is None else f'{goal_s * 1000:.0f} ms'}"

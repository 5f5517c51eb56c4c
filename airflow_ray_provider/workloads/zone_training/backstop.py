"""The driver's view of ``zone_timeout_s`` on Ray: zones reported past their limit, and a hard backstop.

A Ray task's zone clock (:class:`~.timeouts.ReportingZoneClock`) reports a zone past its limit to a
small board actor (``num_cpus=0``); the driver polls that board at most twice a second and cancels
such a task with ``ray.cancel(force=True)``. A trainer blocked in one long C call that holds the GIL
keeps the reporting thread from running too; for those, the driver kills a task once it has run for
``2 x zones x zone_timeout_s + BACKSTOP_GRACE_S``. It must know when the task *started* (a task can
wait in Ray's queue or for a worker process), so each task reports its start to the same board (one
fire-and-forget call per task).
"""

from __future__ import annotations

import time
from typing import Any

POLL_INTERVAL_S = 0.5


def backstop_seconds(zones: int, zone_timeout_s: float, grace_s: float) -> float:
    """How long a task of ``zones`` zones may run before the driver kills it (both engines)."""
    return 2 * zones * zone_timeout_s + grace_s


class TaskBoard:
    """Actor body: collects the keys of tasks that have started and the zones reported past their limit."""

    def __init__(self) -> None:
        self._started: list[int] = []
        self._timed_out: list[tuple[int, int]] = []

    def started(self, key: int) -> None:
        """Called by a task as it starts."""
        self._started.append(key)

    def timed_out(self, key: int, index: int) -> None:
        """Called by task ``key``'s zone clock: zone ``index`` of its batch is past its limit."""
        self._timed_out.append((key, index))

    def take(self) -> tuple[list[int], list[tuple[int, int]]]:
        """Tasks started and zones timed out since the last call."""
        out = self._started, self._timed_out
        self._started, self._timed_out = [], []
        return out


class Backstop:
    """Tracks task start times and says which tasks must be killed, and why.

    :param ray: the ``ray`` module (connected).
    :param limit_s: ``zone_timeout_s``.
    :param grace_s: extra seconds before a task is killed by the backstop.
    """

    def __init__(self, ray: Any, limit_s: float, grace_s: float) -> None:
        self._ray = ray
        self._limit = limit_s
        self._grace = grace_s
        self.board = ray.remote(num_cpus=0, max_restarts=-1)(TaskBoard).remote()
        self._zones: dict[int, int] = {}
        self._started: dict[int, float] = {}
        self._last_poll = 0.0

    def track(self, key: int, zones: int) -> None:
        """Watch a submitted task of ``zones`` zones."""
        self._zones[key] = zones

    def forget(self, key: int) -> None:
        """Stop watching a task (it finished or was killed)."""
        self._zones.pop(key, None)
        self._started.pop(key, None)

    def overdue(self) -> list[tuple[int, int | None]]:
        """Tasks to kill: ``(key, index of its zone past the limit)``, or ``(key, None)`` past the backstop.

        Polls the board at most every 0.5 s.
        """
        now = time.monotonic()
        if now - self._last_poll < POLL_INTERVAL_S:
            return []
        self._last_poll = now
        started, timed_out = self._ray.get(self.board.take.remote())
        # Stamp starts after the call returns: the first one waits for the board actor to start, which
        # takes seconds on a loaded node, and a stamp taken before it would age every task by that wait.
        now = time.monotonic()
        for key in started:
            if key in self._zones:
                self._started.setdefault(key, now)
        out: dict[int, int | None] = {key: index for key, index in timed_out if key in self._zones}
        for key, since in self._started.items():
            if key not in out and now - since > backstop_seconds(self._zones[key], self._limit, self._grace):
                out[key] = None
        return list(out.items())

    def close(self) -> None:
        """End the board actor."""
        self._ray.kill(self.board)

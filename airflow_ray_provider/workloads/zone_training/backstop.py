"""Hard backstop for ``zone_timeout_s``: find tasks stuck far past their zones' time limits.

The in-task watchdog (:mod:`~.watchdog`) stops a trainer at its next
Python bytecode; a trainer blocked in one long C call never gets there. For those, the driver kills
the task. It must know when the task *started* (a task can wait in Ray's queue or for a worker
process), so each task reports its start to a small actor (``num_cpus=0``, one fire-and-forget call
per task); the driver polls that actor at most twice a second and kills a task once it has run for
``2 x zones x zone_timeout_s + BACKSTOP_GRACE_S``.
"""

from __future__ import annotations

import time
from typing import Any

POLL_INTERVAL_S = 0.5


def backstop_seconds(zones: int, zone_timeout_s: float, grace_s: float) -> float:
    """How long a task of ``zones`` zones may run before the driver kills it (both engines)."""
    return 2 * zones * zone_timeout_s + grace_s


class StartBoard:
    """Actor body: collects the keys of tasks that have started."""

    def __init__(self) -> None:
        self._started: list[int] = []

    def started(self, key: int) -> None:
        """Called by a task as it starts."""
        self._started.append(key)

    def take(self) -> list[int]:
        """Keys reported since the last call."""
        out, self._started = self._started, []
        return out


class Backstop:
    """Tracks task start times and says which tasks are overdue.

    :param ray: the ``ray`` module (connected).
    :param limit_s: ``zone_timeout_s``.
    :param grace_s: extra seconds before a task is killed.
    """

    def __init__(self, ray: Any, limit_s: float, grace_s: float) -> None:
        self._ray = ray
        self._limit = limit_s
        self._grace = grace_s
        self.board = ray.remote(num_cpus=0, max_restarts=-1)(StartBoard).remote()
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

    def overdue(self) -> list[int]:
        """Keys of tasks that have run past their budget (polls the board at most every 0.5 s)."""
        now = time.monotonic()
        if now - self._last_poll < POLL_INTERVAL_S:
            return []
        self._last_poll = now
        reported = self._ray.get(self.board.take.remote())
        # Stamp starts after the call returns: the first one waits for the board actor to start, which
        # takes seconds on a loaded node, and a stamp taken before it would age every task by that wait.
        now = time.monotonic()
        for key in reported:
            if key in self._zones:
                self._started.setdefault(key, now)
        return [
            key
            for key, started in self._started.items()
            if now - started > backstop_seconds(self._zones[key], self._limit, self._grace)
        ]

    def close(self) -> None:
        """End the board actor."""
        self._ray.kill(self.board)

"""Per-zone time limit (``zone_timeout_s``): a zone past it ends with its worker process.

Nothing is raised into a running thread. A training task marks on a clock which of its zones it is
fitting and since when; whoever can end the task's process reads that clock:

* **local engine**: the clock lives in memory shared with the driver (:class:`SharedZoneClock`); the
  driver reads it between waits and kills the worker process of a zone past its limit;
* **Ray**: the task may run on another node, so a thread of the worker process reads the clock
  (:class:`ReportingZoneClock`) and, once the zone is past its limit, tells the run's board actor
  (:mod:`.backstop`); the driver then cancels the task with ``ray.cancel(force=True)``, which kills the
  worker process. A C call that holds the GIL keeps that thread from running too: the driver's
  backstop covers it.

Either way the zone becomes a failed row (``timed out after Ns (zone_timeout_s)``), the task's other
zones go back to the queue, and a new worker process takes the killed one's place. A trainer that
swallows exceptions or blocks in C code is stopped all the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

#: What a shared clock holds while no zone is being fitted.
NO_ZONE = -1.0


class ZoneClock(Protocol):
    """Where a task marks the zone it fits (its index in the task's batch) and when that zone started."""

    def start(self, index: int) -> None:
        """Zone ``index`` of the batch starts now."""

    def stop(self) -> None:
        """The zone ended (fitted or raised)."""


class SharedZoneClock:
    """A worker process's clock in two shared doubles (zone index, start time) that its driver reads.

    ``time.monotonic`` is one system-wide clock on Linux and macOS, so the driver compares the start
    with its own ``time.monotonic``. The start is written before the index and read after it, so a
    read racing a write sees a start no older than its index's: the elapsed time it computes is never
    more than the zone really ran.

    :param cells: ``multiprocessing.RawArray("d", 2)`` made by the driver (passed to the worker process).
    """

    def __init__(self, cells: Any) -> None:
        self.cells = cells
        cells[0] = NO_ZONE

    def start(self, index: int) -> None:
        """Zone ``index`` starts now."""
        self.cells[1] = time.monotonic()
        self.cells[0] = float(index)

    def stop(self) -> None:
        """No zone runs."""
        self.cells[0] = NO_ZONE

    def overdue(self, limit_s: float) -> int | None:
        """The index of the zone running for more than ``limit_s`` seconds, if one is (driver side)."""
        now = time.monotonic()  # before the reads: the elapsed time is a lower bound
        index = self.cells[0]
        since = self.cells[1]
        return int(index) if index >= 0 and now - since > limit_s else None


class ReportingZoneClock:
    """A Ray task's clock, watched by a thread of its worker that calls ``report(index)`` once per zone
    found past ``limit_s`` (the thread reads and reports; it never touches the training thread).

    Used as ``with ReportingZoneClock(...) as clock:`` around the task's zones.

    :param limit_s: ``zone_timeout_s``.
    :param report: called from the watching thread with the overdue zone's index (one actor call).
    """

    def __init__(self, limit_s: float, report: Callable[[int], Any]) -> None:
        self._limit = limit_s
        self._report = report
        self._poll = max(0.01, min(0.1, limit_s / 4))
        self._running: tuple[int, float] | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="zone-clock", daemon=True)

    def start(self, index: int) -> None:
        """Zone ``index`` starts now."""
        self._running = (index, time.monotonic())

    def stop(self) -> None:
        """No zone runs."""
        self._running = None

    def __enter__(self) -> ReportingZoneClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        reported = None
        while not self._done.wait(self._poll):
            running = self._running  # one read: a tuple is replaced whole, never changed in place
            if running is None or running is reported or time.monotonic() - running[1] <= self._limit:
                continue
            self._report(running[0])
            reported = running

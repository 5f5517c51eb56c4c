"""Progress lines in a job's log: how much of the work is done, how fast, and how long it has run.

One reporter for every workload; the unit is the workload's (rows evaluated, zones trained). A line
looks like this (one line in the log)::

    zones: 812/2000 done (810 succeeded, 2 failed), 1188 remaining (40.6%) | 161.2 zones/s (last 170.4)
        | 52 tasks done, 6 in flight, task goal 250 ms | 5.0s elapsed

The caller says when to report: from its own loop (:meth:`Progress.maybe_report`) or from a background
thread (:meth:`Progress.reporting`). Lines go to the caller's logger, so they carry the workload's
module name.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


class Progress:
    """Counts finished units of work and logs a progress line at most every ``interval_s`` seconds.

    :param total: units to do in this run.
    :param unit: what is counted, plural (``"rows"``, ``"zones"``).
    :param interval_s: seconds between lines.
    :param logger: where the lines go (the calling module's logger).
    :param detail: extra text for each line, from the caller's state (``final=True`` for the last line).
    :param show_outcomes: whether lines split the done units into succeeded and failed.
    """

    def __init__(
        self,
        total: int,
        unit: str,
        interval_s: float,
        *,
        logger: logging.Logger | None = None,
        detail: Callable[[bool], str] | None = None,
        show_outcomes: bool = False,
    ) -> None:
        self.total = total
        self.unit = unit
        self.interval_s = interval_s
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        #: When the first and the latest units were counted (``None`` before any).
        self.first_at: float | None = None
        self.last_at: float | None = None
        self._log = logger or log
        self._detail = detail
        self._show_outcomes = show_outcomes
        self._last_report = self.started
        self._done_at_last_report = 0

    @property
    def succeeded(self) -> int:
        """Units done without failing."""
        return self.done - self.failed

    def add(self, count: int, *, failed: int = 0) -> None:
        """Count ``count`` finished units, ``failed`` of them failed."""
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        self.done += count
        self.failed += failed

    def maybe_report(self) -> None:
        """Log a line if ``interval_s`` has passed since the last one."""
        now = time.monotonic()
        if now - self._last_report >= self.interval_s:
            self._report(now, final=False)

    def report(self, *, final: bool = False) -> None:
        """Log a line now (``final``: the closing line, once the work is over)."""
        self._report(time.monotonic(), final=final)

    @contextlib.contextmanager
    def reporting(self) -> Iterator[Progress]:
        """Log a line every ``interval_s`` from a background thread, and the closing line at the end."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(self.interval_s):
                self.report()

        thread = threading.Thread(target=run, name=f"progress-{self.unit}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=5)
            self.report(final=True)

    def line(self, now: float, *, final: bool = False) -> str:
        """The progress line at monotonic time ``now``."""
        elapsed = max(now - self.started, 1e-9)
        recent = (self.done - self._done_at_last_report) / max(now - self._last_report, 1e-9)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        outcomes = f" ({self.succeeded} succeeded, {self.failed} failed)" if self._show_outcomes else ""
        parts = [
            f"{self.unit}: {self.done}/{self.total} done{outcomes}, {self.total - self.done} remaining "
            f"({pct:.1f}%)",
            f"{_rate(self.done / elapsed)} {self.unit}/s (last {_rate(recent)})",
        ]
        if self._detail is not None:
            parts.append(self._detail(final))
        parts.append(f"{elapsed:.1f}s elapsed")
        return " | ".join(part for part in parts if part)

    def _report(self, now: float, *, final: bool) -> None:
        self._log.info("%s", self.line(now, final=final))
        self._last_report, self._done_at_last_report = now, self.done


def _rate(per_second: float) -> str:
    """A throughput with as many decimals as it needs (``12345``, ``3.2``)."""
    return f"{per_second:.0f}" if per_second >= 100 else f"{per_second:.1f}"

"""Progress lines in the job log: zones done / failed / remaining, throughput, tasks in flight."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("airflow_ray_provider.workloads.zone_training")


class Progress:
    """Counts finished zones and logs a line at most every ``interval_s`` seconds.

    :param total: zones to train in this run.
    :param interval_s: seconds between lines.
    """

    def __init__(self, total: int, interval_s: float) -> None:
        self.total = total
        self.succeeded = 0
        self.failed = 0
        self.tasks = 0
        self._interval = interval_s
        self._start = time.monotonic()
        self._last_log = self._start
        self._last_done = 0

    @property
    def done(self) -> int:
        """Zones finished, succeeded or failed."""
        return self.succeeded + self.failed

    def add(self, *, succeeded: int, failed: int) -> None:
        """Count the zones of one finished task."""
        self.succeeded += succeeded
        self.failed += failed
        self.tasks += 1

    def maybe_log(self, in_flight: int, goal_s: float | None) -> None:
        """Log a progress line if ``interval_s`` has passed since the last one."""
        now = time.monotonic()
        if now - self._last_log >= self._interval:
            self._log(now, in_flight, goal_s)

    def final(self) -> None:
        """Log the closing line."""
        self._log(time.monotonic(), 0, None)

    def _log(self, now: float, in_flight: int, goal_s: float | None) -> None:
        elapsed = max(now - self._start, 1e-9)
        recent = (self.done - self._last_done) / max(now - self._last_log, 1e-9)
        log.info(
            "zones: %d/%d done (%d succeeded, %d failed), %d remaining | %.1f zones/s (last %.1f) | "
            "%d tasks done, %d in flight, task goal %s | %.1fs elapsed",
            self.done,
            self.total,
            self.succeeded,
            self.failed,
            self.total - self.done,
            self.done / elapsed,
            recent,
            self.tasks,
            in_flight,
            "probing" if goal_s is None else f"{goal_s * 1000:.0f} ms",
            elapsed,
        )
        self._last_log, self._last_done = now, self.done

"""Where an evaluation run's seconds go: one clock, named phases, written into ``metrics.json``.

Phases, in the order a run passes them (``None`` where a phase did not happen, e.g. no Ray on the
in-process engine)::

    preflight_s        config, Parquet metadata, a sample, each model loaded and checked once (on a
                       thread: a private Ray's start overlaps it)
    ray_init_s         connecting to (or starting) Ray (a running cluster: from the driver's first block)
    actor_startup_s    pipeline started -> the first block starts scoring (worker processes, imports,
                       the rest of preflight; 0 when the driver's own thread was scoring already)
    first_row_s        run start -> the driver holds the first scored block
    scoring_s          first block started -> last block merged
    ray_shutdown_s     the run's wait for Ray's shutdown before finalize (it runs on a thread beside
                       finalize and the artifact write, so about 0)
    finalize_s         exact metrics and bootstrap (the artifact write after it is not included)
    total_s            the whole run (interpreter start and imports not included)
"""

from __future__ import annotations

import time

#: The phase keys, in order.
PHASES = (
    "preflight_s",
    "ray_init_s",
    "actor_startup_s",
    "first_row_s",
    "scoring_s",
    "ray_shutdown_s",
    "finalize_s",
    "total_s",
)


class PhaseClock:
    """Monotonic marks of one run; :meth:`timings` turns them into the ``timings`` mapping."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: dict[str, float] = {}

    def mark(self, name: str, at: float | None = None) -> float:
        """Record ``name`` now (or at monotonic ``at``); returns the mark."""
        self.marks[name] = time.monotonic() if at is None else at
        return self.marks[name]

    def mark_rows(self, *firsts: float | None, last: float | None) -> None:
        """Mark ``first_row`` at the earliest of ``firsts`` (those known; each scorer's first block) and
        ``last_row`` at ``last`` (``None``: now, nothing was scored)."""
        known = [t for t in firsts if t is not None]
        if known:
            self.mark("first_row", min(known))
        self.mark("last_row", last)

    def between(self, start: str, end: str) -> float | None:
        """Seconds from mark ``start`` to mark ``end`` (``None`` when either is missing)."""
        if start not in self.marks or end not in self.marks:
            return None
        return round(self.marks[end] - self.marks[start], 3)

    def timings(self, rows: int) -> dict[str, float | None]:
        """Every phase of :data:`PHASES` plus two throughputs (rows/s over scoring and over the run).

        Marks used: ``preflight``, ``ray_start``, ``ray``, ``pipeline`` (stream started),
        ``first_scoring`` (first block started), ``first_row``, ``last_row``, ``ray_closed``, ``finalized``.
        """
        self.marks.setdefault("start", self.started)
        total = round(time.monotonic() - self.started, 3)
        scoring = self.between("first_scoring", "last_row") or self.between("first_row", "last_row")
        return {
            "preflight_s": self.between("start", "preflight"),
            "ray_init_s": self.between("ray_start", "ray"),
            "actor_startup_s": _at_least_zero(self.between("pipeline", "first_scoring")),
            "first_row_s": self.between("start", "first_row"),
            "scoring_s": scoring,
            "ray_shutdown_s": self.between("last_row", "ray_closed"),
            "finalize_s": self.between("ray_closed", "finalized") or self.between("last_row", "finalized"),
            "total_s": total,
            "scoring_rows_per_s": round(rows / scoring, 1) if scoring else None,
            "run_rows_per_s": round(rows / total, 1) if total else None,
        }

    @staticmethod
    def from_wall(wall: float) -> float:
        """The monotonic time of a wall-clock instant (actors report wall-clock spans)."""
        return wall - (time.time() - time.monotonic())


def _at_least_zero(seconds: float | None) -> float | None:
    return None if seconds is None else max(0.0, seconds)

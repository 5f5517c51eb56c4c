"""Which engine a workload run uses, and why: both workloads' ``engine: auto | ray | local`` answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineChoice:
    """The engine a run uses and why (logged, and written into the run's artifact as ``run.engine``)."""

    engine: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        """For ``run.engine`` in ``metrics.json`` / ``summary.json``."""
        return {"name": self.engine, "reason": self.reason}

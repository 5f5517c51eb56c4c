"""``make demo`` reports where its seconds went (metadata DB, then each task in run order)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest

from tools.demo import timing_line

pytestmark = pytest.mark.unit
T0 = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


@dataclass
class _TaskInstance:
    task_id: str
    start_date: dt.datetime | None
    end_date: dt.datetime | None


class _DagRun:
    def __init__(self, *tis: _TaskInstance) -> None:
        self.tis = list(tis)

    def get_task_instances(self) -> list[_TaskInstance]:
        return self.tis


def test_timing_line_lists_the_db_then_tasks_in_start_order_and_skips_tasks_that_never_ran() -> None:
    run = _DagRun(
        _TaskInstance("evaluate", T0 + dt.timedelta(seconds=9), T0 + dt.timedelta(seconds=15.5)),
        _TaskInstance("create_cluster", T0, T0 + dt.timedelta(seconds=8.25)),
        _TaskInstance("promote", None, None),
    )
    assert timing_line(run, 2.04) == "db 2.0, create_cluster 8.2, evaluate 6.5 s"

"""The zone scheduler's part of a progress line (tasks, in flight, the task size the batcher aims for)."""

from __future__ import annotations

import pytest

from airflow_ray_provider.workloads.zone_training.scheduler import progress_detail

pytestmark = pytest.mark.unit


def test_task_goal_while_zones_remain() -> None:
    assert progress_detail(0, 2, None, final=False) == "0 tasks done, 2 in flight, task goal probing"
    assert progress_detail(9, 6, 0.25, final=False) == "9 tasks done, 6 in flight, task goal 250 ms"


def test_closing_line_has_no_task_goal() -> None:
    """All zones are done: no goal to report (it used to say "task goal probing" here)."""
    assert progress_detail(12, 0, None, final=True) == "12 tasks done, 0 in flight"
    assert progress_detail(12, 0, 0.3, final=True) == "12 tasks done, 0 in flight"

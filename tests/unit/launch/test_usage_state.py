"""The dashboard's state API lists: a filter is not a cut; a limit or a source's cut is named."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ray_provider.launch.usage.state import DashboardState

pytestmark = pytest.mark.unit


class _Answering(DashboardState):
    """A dashboard that answers every read with one state API list body (Ray 2.60's shape)."""

    def __init__(self, **counts: Any) -> None:
        super().__init__("http://dashboard.invalid")
        self.counts = counts
        self.paths: list[str] = []

    def get(self, path: str) -> Any:
        self.paths.append(path)
        return {"result": True, "msg": "", "data": {"result": self.counts}}


def test_the_jobs_actors_filtered_out_of_all_the_clusters_actors_are_not_a_cut() -> None:
    # A head with the job's supervisor (its own job) and the job's one actor: Ray counts both in
    # `total` and returns the one that matches the job.
    state = _Answering(total=2, num_after_truncation=2, num_filtered=1, result=[{"actor_id": "a1"}])
    rows, note = state.job_actors("02000000")
    assert rows == [{"actor_id": "a1"}] and note is None
    assert "filter_keys=job_id" in state.paths[0] and "filter_values=02000000" in state.paths[0]


def test_rows_left_out_by_the_limit_are_named() -> None:
    state = _Answering(total=5, num_after_truncation=5, num_filtered=5, result=[{}, {}, {}])
    assert state.tasks("02000000") == (
        [{}, {}, {}],
        "/api/v0/tasks listed 3 of the 5 matching rows (its limit)",
    )


def test_task_events_ray_dropped_are_named() -> None:
    state = _Answering(total=250, num_after_truncation=200, num_filtered=200, result=[{}] * 200)
    _, note = state.tasks("02000000")
    assert note == "/api/v0/tasks's source kept 200 of 250 rows (cut there, or events Ray dropped)"


def test_an_answer_without_the_stage_counts_is_taken_as_whole() -> None:
    state = _Answering(total=7, result=[{}])
    assert state.job_actors("02000000") == ([{}], None)

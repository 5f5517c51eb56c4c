"""The kill rule of SubmitRayJobOperator: a worker's SIGTERM leaves the job to the retry by default."""

from __future__ import annotations

import pytest
from airflow.exceptions import TaskDeferred

pytestmark = pytest.mark.unit


def _op(**kwargs):
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    # a connection that does not exist: any Job API call (a stop) fails loudly
    op = SubmitRayJobOperator(task_id="submit", entrypoint="python x.py", ray_conn_id="no_such_ray", **kwargs)
    op._submission_id = "airflow-d-submit-run-abc"
    return op


def test_by_default_a_sigterm_leaves_the_job_running_for_the_retry_to_reattach(capfd):
    """The default used to stop the job on any SIGTERM (eviction, shutdown): the retry started over."""
    op = _op()
    assert op.stop_on_kill is None
    op.on_kill()  # touches no Job API: the unknown connection would raise
    assert "a retry re-attaches to it" in capfd.readouterr().out


def test_stop_on_kill_true_stops_the_job_on_sigterm():
    from airflow_ray_provider.exceptions import RayInvalidInputError

    with pytest.raises(RayInvalidInputError, match="no_such_ray"):
        _op(stop_on_kill=True).on_kill()  # it goes for the Job API to stop the job


@pytest.mark.parametrize(("stop_on_kill", "user_kill_stops"), [(None, True), (True, True), (False, False)])
def test_a_users_kill_of_a_deferred_task_stops_the_job_unless_false(stop_on_kill, user_kill_stops):
    with pytest.raises(TaskDeferred) as deferred:
        _op(stop_on_kill=stop_on_kill)._defer("airflow-d-submit-run-abc", 0.0)
    assert deferred.value.trigger.stop_on_cancel is user_kill_stops

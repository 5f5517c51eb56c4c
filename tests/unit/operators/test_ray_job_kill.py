"""The kill rule of SubmitRayJobOperator: a worker's SIGTERM leaves the job to the retry by default."""

from __future__ import annotations

import pytest

from airflow_ray_provider.jobs.client import JobClient
from airflow_ray_provider.launch import Cleanup, ClusterTarget, Ending, JobRun
from airflow_ray_provider.launch.run import actions_for

pytestmark = pytest.mark.unit


def _op(cleanup: str | None = None):
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    op = SubmitRayJobOperator(task_id="submit", entrypoint="python x.py", cleanup=cleanup)
    # a cluster nothing answers at: any Job API call (a stop) fails loudly, at once
    client = JobClient("http://127.0.0.1:9", retry_attempts=1)
    sid = "airflow-d-submit-run-abc"
    op.run = JobRun(ClusterTarget(client=client), submission_id=sid, cleanup=op.cleanup, say=op.log.info)
    op.run.choice = None
    return op


def test_by_default_a_sigterm_leaves_the_job_running_for_the_retry_to_reattach(capfd):
    op = _op()
    assert op.cleanup is Cleanup.ON_EXCEPTION
    op.on_kill()  # touches no Job API: the address would fail
    assert "the next try re-attaches to it" in capfd.readouterr().out
    assert op.run is not None and op.run.ending is Ending.WORKER_SIGTERM and not op.run.stopped


def test_cleanup_always_stops_the_job_on_sigterm():
    from airflow_ray_provider.exceptions import RayDashboardUnreachableError

    with pytest.raises(RayDashboardUnreachableError, match=r"127\.0\.0\.1:9"):
        _op("always").on_kill()  # it goes for the Job API to stop the job


@pytest.mark.parametrize(("cleanup", "user_kill_stops"), [(None, True), ("always", True), ("never", False)])
def test_a_users_kill_of_a_deferred_task_stops_the_job_unless_never(cleanup, user_kill_stops):
    from airflow_ray_provider.triggers.ray_job import RayJobTrigger

    op = _op(cleanup)
    assert op.run is not None
    trigger = RayJobTrigger(run=op.run.hand_over())
    word = Cleanup(trigger.run_state["cleanup"])
    assert actions_for(word, Ending.USER_KILL).stop_job is user_kill_stops

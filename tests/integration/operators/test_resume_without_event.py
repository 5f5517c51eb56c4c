"""A deferrable task resumed in ``execute_complete`` without an event (its worker was SIGKILLed between the
trigger firing and the resume) looks at its job again instead of failing with ``unexpected trigger event``."""

from __future__ import annotations

import pytest

from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from tests.fixtures.ray_job import StandInTI, context_for, job_ids_for

pytestmark = pytest.mark.integration


def test_a_resume_without_an_event_re_observes_the_job_and_submits_nothing(
    ray_conn_id, ray_job_hook, job_prefix
):
    ti = StandInTI(dag_id=f"{job_prefix}_resume")
    first = SubmitRayJobOperator(
        task_id=ti.task_id, ray_conn_id=ray_conn_id, entrypoint="python -c 'print(1)'", poll_interval=0.3
    )
    done = first.execute(context_for(ti))
    assert done["status"] == "SUCCEEDED"

    rerun = SubmitRayJobOperator(
        task_id=ti.task_id,
        ray_conn_id=ray_conn_id,
        entrypoint="python -c 'print(1)'",
        poll_interval=0.3,
        deferrable=True,
    )
    result = rerun.execute_complete(context_for(StandInTI(dag_id=ti.dag_id, try_number=2)), None)
    base = base_submission_id(ti.dag_id, ti.run_id, ti.task_id)
    assert result["submission_id"] == base and result["status"] == JobStatus.SUCCEEDED.value
    assert job_ids_for(ray_job_hook, job_prefix) == [base]

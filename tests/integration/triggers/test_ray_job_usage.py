"""A user's kill of a deferred Job API task makes its usage record (``ended_by: killed``) in the triggerer.

On the shared real head: the operator defers (the trigger carries the record's request), the trigger
runs in an asyncio loop, then the triggerer's user-kill path runs (the run cancelled, then ``on_kill``):
the job is stopped and the record's line goes into the log (no ``execute_complete`` runs).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from airflow_ray_provider.jobs import JobStatus
from tests.fixtures.ray_job import StandInTI, context_for
from tests.fixtures.triggers import run_then_kill
from tests.fixtures.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LONG = ["python", "-c", "import time, ray; ray.init(); time.sleep(120)"]


def test_a_kill_of_the_deferred_task_stops_the_job_and_logs_a_killed_record(
    ray_conn_id: str, ray_job_hook: Any, capfd: Any
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    op = SubmitRayJobOperator(
        task_id="killed", ray_conn_id=ray_conn_id, entrypoint=LONG, deferrable=True, poll_interval=0.3,
        entrypoint_num_cpus=0.5, prices={"CPU": 0.05},
    )  # fmt: skip
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context_for(StandInTI(dag_id=f"rj_kill_{uuid.uuid4().hex[:6]}")))
    carried = deferred.value.trigger
    trigger = type(carried)(**carried.serialize()[1])  # as the triggerer builds it
    usage, sid = trigger.run_state["usage"], trigger.run_state["submission_id"]
    assert usage["prices"]["CPU"] == 0.05 and usage["entrypoint"] == {"CPU": 0.5}

    async def running() -> bool:
        state = await asyncio.to_thread(ray_job_hook.get_job, sid)
        return state is not None and state.status is JobStatus.RUNNING

    asyncio.run(run_then_kill(trigger, running))

    record = trigger.record
    assert record is not None and record["ended_by"] == "killed" and record["mode"] == "standing"
    assert record["submission_id"] == sid and record["cost"] is not None
    assert record["job_status"] in ("STOPPED", "RUNNING")  # Ray stops a job asynchronously
    out = capfd.readouterr().out
    assert f"Usage of Ray job {sid} (task killed while deferred): [job killed," in out
    eventually(lambda: ray_job_hook.get_job(sid).status is JobStatus.STOPPED, what="the job stopped")

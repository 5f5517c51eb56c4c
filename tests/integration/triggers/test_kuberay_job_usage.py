"""A deferred RayJob task in the triggerer: a user's kill makes its usage record (``ended_by: killed``), and
the wait never imports ``ray`` (the triggerer must not load it).

Through the emulated Kubernetes API and the test KubeRay controller (``tests/fixtures/kuberay*.py``) on
the shared real head: the operator defers, its trigger runs in an asyncio loop until it has seen the Ray
job running, then the triggerer's user-kill path runs (the run cancelled, then ``on_kill``). No
``execute_complete`` runs, so the record's line goes into the log, and the RayJob is deleted.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.kuberay import HEAD_MODE
from tests.fixtures.ray_job import StandInTI, context_for
from tests.fixtures.triggers import run_then_kill

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LONG = "import time, ray; ray.init(); time.sleep(120)"


def _deferred_trigger(kuberay_conn: str, code: str = LONG) -> Any:
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator

    op = KubeRayJobOperator(
        task_id="killed", cluster_conn_id=kuberay_conn, entrypoint=[sys.executable, "-c", code],
        spec={"annotations": {HEAD_MODE: "shared"}}, poll_interval=0.3, ttl_seconds_after_finished=0,
        deferrable=True,
    )  # fmt: skip
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context_for(StandInTI(dag_id=f"rayjob_kill_{uuid.uuid4().hex[:6]}")))
    trigger = deferred.value.trigger
    return type(trigger)(**trigger.serialize()[1])  # as the triggerer builds it


def test_a_kill_of_the_deferred_task_logs_a_killed_record_and_deletes_the_rayjob(
    kube_emulator: Any, rayjob_controller: Any, kuberay_conn: str, rayjobs: Any, capfd: Any
) -> None:
    trigger = _deferred_trigger(kuberay_conn)
    name = trigger.run_state["target"]["rayjob"]

    async def running() -> bool:
        rayjob = await asyncio.to_thread(rayjobs.find, name)
        return ((rayjob or {}).get("status") or {}).get("jobStatus") == "RUNNING"

    asyncio.run(run_then_kill(trigger, running))

    record = trigger.record
    assert record is not None and record["ended_by"] == "killed" and record["mode"] == "rayjob"
    assert record["job_status"] == "RUNNING" and record["submission_id"]
    out = capfd.readouterr().out
    line = f"Usage of Ray job {record['submission_id']} (task killed while deferred): [job killed, RUNNING]"
    assert line in out
    rayjobs.wait_until_gone(name, timeout=30)  # deleted on the kill


#: The triggerer's side of a deferred run, in a process where any import of ``ray`` fails.
WITHOUT_RAY = """
import asyncio, json, sys
sys.modules["ray"] = None  # "import ray" (or any ray.*) raises ImportError from here on
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

async def first_event():
    async for event in RayJobTrigger(**json.loads(sys.argv[1])).run():
        return event.payload

print(json.dumps(asyncio.run(first_event())))
"""


def test_a_deferred_rayjob_is_waited_on_and_its_log_streamed_without_importing_ray(
    kube_emulator: Any, rayjob_controller: Any, kuberay_conn: str, tmp_path: Path
) -> None:
    trigger = _deferred_trigger(kuberay_conn, "import time; print('made it'); time.sleep(2)")
    kwargs = trigger.serialize()[1]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY, json.dumps(kwargs)], capture_output=True, text=True, timeout=180,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    event = json.loads(done.stdout.strip().splitlines()[-1])
    assert event["error"] is None, event["error"]
    assert event["run"]["step"]["ending"] == "succeeded"
    assert "made it" in done.stderr + done.stdout  # the job's log was streamed through the async reader

"""RayJobTrigger: a run's state in its kwargs and its event, JSON-safe, no secret, no ``ray`` import."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

from airflow_ray_provider.exceptions import RayProviderError
from airflow_ray_provider.jobs.client import JobClient
from airflow_ray_provider.launch import Cleanup, ClusterTarget, JobRun
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

pytestmark = pytest.mark.unit
TOKEN = "tok-0123456789abcdef"


def _state() -> dict:
    client = JobClient("http://127.0.0.1:1", token=TOKEN)
    run = JobRun(ClusterTarget(client=client, face_ref={"ray_conn_id": "ray_x"}), submission_id="s-1",
                 base_id="s-1", cleanup=Cleanup.ALWAYS, timeout=60.0, poll_interval=2.0)  # fmt: skip
    return run.hand_over()


def test_serialize_round_trip_and_classpath_import():
    trigger = RayJobTrigger(run=_state())
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # JSON-safe, as the triggerer stores it
    module, _, name = classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert classpath == "airflow_ray_provider.triggers.ray_job.RayJobTrigger"
    run = kwargs["run"]
    assert (run["submission_id"], run["cleanup"], run["timeout"], run["target"]["ray_conn_id"]) == (
        "s-1", "always", 60.0, "ray_x",
    )  # fmt: skip
    assert set(kwargs) == set(inspect.signature(RayJobTrigger.__init__).parameters) - {"self"}


def test_trigger_kwargs_carry_no_secret():
    _, kwargs = RayJobTrigger(run=_state()).serialize()
    assert TOKEN not in json.dumps(kwargs) and "authorization" not in json.dumps(kwargs).lower()


def test_trigger_module_does_not_import_ray():
    code = "import sys, airflow_ray_provider.triggers.ray_job as t; print('ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("event", [{}, {"run": None}, {"status": "done", "submission_id": "s"}, ["run"]])
def test_execute_complete_refuses_an_event_that_is_not_a_runs(event):
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    op = SubmitRayJobOperator(task_id="t", entrypoint="python x.py")
    with pytest.raises(RayProviderError, match="unexpected trigger event"):
        op.execute_complete({}, event)  # type: ignore[arg-type]

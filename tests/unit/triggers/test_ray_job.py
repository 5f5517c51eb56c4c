"""RayJobTrigger: serialisation round trip, classpath import, no ``ray`` import, event checks."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from airflow_ray_provider.exceptions import RayProviderError
from airflow_ray_provider.jobs.outcome import make_event, validate_event
from airflow_ray_provider.jobs.status import JobState, JobStatus
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

pytestmark = pytest.mark.unit


def test_serialize_round_trip_and_classpath_import():
    trigger = RayJobTrigger(
        submission_id="s-1",
        cluster={
            "backend": "local",
            "name": "h",
            "dashboard_url": "http://127.0.0.1:1",
            "auth_token_file": "/t",
        },
        poll_interval=2,
        timeout=60,
        start_time=1700000000.5,
        log_offset=42,
        stream_logs=False,
        stop_on_timeout=False,
        stop_on_cancel=False,
        retry_attempts=2,
    )
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # JSON-safe, as the triggerer stores it
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    again = cls(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert classpath == "airflow_ray_provider.triggers.ray_job.RayJobTrigger"
    assert kwargs["start_time"] == 1700000000.5 and kwargs["log_offset"] == 42
    import inspect

    assert set(kwargs) == set(inspect.signature(RayJobTrigger.__init__).parameters) - {"self"}


def test_trigger_kwargs_carry_no_secret():
    _, kwargs = RayJobTrigger(submission_id="s", ray_conn_id="ray_default").serialize()
    assert "token" not in json.dumps(kwargs).lower()


def test_trigger_module_does_not_import_ray():
    code = (
        "import sys, airflow_ray_provider.triggers.ray_job as t; "
        "t.RayJobTrigger(submission_id='s', ray_conn_id='c').serialize(); "
        "print('ray' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_events_are_validated():
    state = JobState(submission_id="s", status=JobStatus.SUCCEEDED)
    event = make_event("done", "s", state=state, log_offset=3)
    assert validate_event(event) is event
    for bad in (
        None,
        {},
        {"status": "weird", "submission_id": "s"},
        {"status": "done", "submission_id": "s"},
    ):
        with pytest.raises(RayProviderError):
            validate_event(bad)

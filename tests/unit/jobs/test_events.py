"""Typed trigger events: checked where they are made and where they are read; payloads stay readable."""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.exceptions import RayProviderError
from airflow_ray_provider.jobs.events import (
    JobDone,
    JobTimedOut,
    JobWaitFailed,
    RayJobDone,
    RayJobWaitFailed,
    parse_job_event,
    parse_rayjob_event,
)
from airflow_ray_provider.jobs.status import JobState, JobStatus

pytestmark = pytest.mark.unit

DONE_STATE = JobState(submission_id="s", status=JobStatus.FAILED, driver_exit_code=3)


@pytest.mark.parametrize(
    "event",
    [
        JobDone("s", DONE_STATE, 12),
        JobTimedOut("s", True, 5),
        JobTimedOut("s", False, 5, JobState(submission_id="s", status=JobStatus.RUNNING)),
        JobWaitFailed("s", "job not found", 3),
    ],
)
def test_job_events_round_trip_through_json(event):
    assert parse_job_event(json.loads(json.dumps(event.to_payload()))) == event


@pytest.mark.parametrize(
    "event",
    [
        RayJobDone("rj", {"name": "rj", "job_status": "FAILED"}, "http://x:1", 4, "tail"),
        RayJobWaitFailed("rj", "m"),
    ],
)
def test_rayjob_events_round_trip(event):
    assert parse_rayjob_event(json.loads(json.dumps(event.to_payload()))) == event


def test_events_are_checked_where_they_are_made():
    with pytest.raises(RayProviderError, match="without submission_id"):
        JobWaitFailed("", "m")
    with pytest.raises(RayProviderError, match="has not finished"):
        JobDone("s", JobState(submission_id="s", status=JobStatus.RUNNING))
    with pytest.raises(RayProviderError, match="RayJob's name"):
        RayJobDone("", {})


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (None, "unexpected trigger event"),
        ({"status": "weird", "submission_id": "s"}, "unexpected trigger event"),
        ({"status": "done", "submission_id": ""}, "without submission_id"),
        ({"status": "done", "submission_id": "s"}, "without the job's state"),
    ],
)
def test_events_are_checked_where_they_are_read(payload, match):
    with pytest.raises(RayProviderError, match=match):
        parse_job_event(payload)
    with pytest.raises(RayProviderError, match="unexpected RayJob trigger event"):
        parse_rayjob_event({"status": "timeout"})


def test_a_timeout_event_of_an_earlier_release_still_reads():
    old = {"status": "timeout", "submission_id": "s", "job": None, "log_offset": 0, "message": "stopped"}
    assert parse_job_event(old) == JobTimedOut("s", True, 0)
    assert parse_job_event({**old, "message": "left running"}) == JobTimedOut("s", False, 0)

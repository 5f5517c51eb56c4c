"""The provider's JobStatus mirrors Ray's member for member, and one rule decides terminal/success."""

from __future__ import annotations

import pytest

from airflow_ray_provider.jobs import JobState, JobStatus

pytestmark = pytest.mark.unit


def test_mirrors_ray_job_status_member_for_member():
    from ray.job_submission import JobStatus as RayJobStatus

    assert [m.name for m in JobStatus] == [m.name for m in RayJobStatus]
    assert [m.value for m in JobStatus] == [m.value for m in RayJobStatus]
    for ours in JobStatus:
        theirs = RayJobStatus(ours.value)
        assert ours.is_terminal() == theirs.is_terminal(), ours
        assert JobStatus(theirs).is_terminal() == theirs.is_terminal()
        assert ours == theirs  # both are str enums with the same value


def test_only_succeeded_is_success():
    assert [s.value for s in JobStatus if s.is_success()] == ["SUCCEEDED"]
    assert JobStatus("SUCCEEDED").is_success() and not JobStatus("FAILED").is_success()
    with pytest.raises(ValueError):
        JobStatus("DONE").is_terminal()


def test_state_parses_api_payload_and_round_trips():
    payload = {
        "type": "SUBMISSION", "job_id": "02000000", "submission_id": "s-1", "status": "FAILED",
        "message": "boom", "driver_exit_code": 3, "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR",
        "start_time": 1000, "end_time": 2000, "entrypoint": "python x.py", "metadata": {"k": "v"},
        "runtime_env": {}, "driver_info": None,
    }  # fmt: skip
    state = JobState.from_api(payload)
    assert state.status is JobStatus.FAILED and state.is_terminal and not state.is_success
    assert state.driver_exit_code == 3 and state.metadata == {"k": "v"}
    assert JobState.from_api(state.to_dict()) == state
    assert state.to_dict()["status"] == "FAILED"


def test_state_rejects_payload_without_id_or_with_unknown_status():
    with pytest.raises(ValueError, match="submission_id"):
        JobState.from_api({"status": "RUNNING"})
    with pytest.raises(ValueError):
        JobState.from_api({"submission_id": "x", "status": "WEIRD"})

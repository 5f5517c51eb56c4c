"""Final states become clear provider errors carrying what a user needs."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayJobFailedError, RayJobStoppedError, RayJobTimeoutError
from airflow_ray_provider.jobs import JobState, JobStatus
from airflow_ray_provider.jobs.outcome import job_result, raise_for_state, timeout_error

pytestmark = pytest.mark.unit
LOG = "\n".join(f"log line {i}" for i in range(120))


def test_failed_carries_id_status_exit_code_and_last_50_lines():
    state = JobState(submission_id="s-9", status=JobStatus.FAILED, driver_exit_code=7, message="exit 7")
    with pytest.raises(RayJobFailedError) as excinfo:
        raise_for_state(state, LOG)
    err = excinfo.value
    assert (err.submission_id, err.status, err.exit_code) == ("s-9", "FAILED", 7)
    assert err.log_tail.splitlines() == [f"log line {i}" for i in range(70, 120)]
    assert "exit code 7" in str(err) and "log line 119" in str(err) and "log line 69\n" not in str(err)


def test_stopped_has_its_own_error_and_success_returns():
    with pytest.raises(RayJobStoppedError) as excinfo:
        raise_for_state(JobState(submission_id="s", status=JobStatus.STOPPED), "bye")
    assert excinfo.value.status == "STOPPED" and excinfo.value.log_tail == "bye"
    assert raise_for_state(JobState(submission_id="s", status=JobStatus.SUCCEEDED), "") is None
    err = timeout_error("s", 5, LOG, stopped=True)
    assert isinstance(err, RayJobTimeoutError) and "stopped" in str(err)


def test_job_result_shape():
    result = job_result(JobState(submission_id="s", status=JobStatus.SUCCEEDED), "http://h:1")
    assert result == {
        "submission_id": "s",
        "status": "SUCCEEDED",
        "dashboard_url": "http://h:1",
        "job_url": "http://h:1/#/jobs/s",
    }


def test_a_failed_job_error_carries_its_log_once_and_no_page_long_lines():
    """Ray's message appends its own 20,000-character log copy; the error used to carry both."""
    ray_says = (
        "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
        + LOG
    )
    entrypoint_line = "python -m airflow_ray_provider.workloads.evaluate --config-json " + "x" * 5000
    state = JobState(submission_id="s", status=JobStatus.FAILED, driver_exit_code=1, message=ray_says)
    with pytest.raises(RayJobFailedError) as excinfo:
        raise_for_state(state, entrypoint_line + "\n" + LOG)
    text = str(excinfo.value)
    assert text.count("log line 119") == 1 and "failed with exit code 1" in text
    assert "last available logs" not in text
    long_line = ("python -m" + "x" * 600).replace("x", "y")
    with pytest.raises(RayJobFailedError) as excinfo:
        raise_for_state(state, long_line)
    assert "... (109 more characters)" in str(excinfo.value) and len(str(excinfo.value)) < 1000

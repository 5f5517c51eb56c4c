"""The wait's one step function, table-driven over every status, observation and cleanup case."""

from __future__ import annotations

import pytest

from airflow_ray_provider.jobs import JobState, JobStatus
from airflow_ray_provider.launch.run import Cleanup, Ending, Observation, WaitPlan, step

pytestmark = pytest.mark.unit

START = 1_000.0


def _seen(status: JobStatus | None, *, now: float = START + 1, log: str | None = None, killed=None):
    if status is None:
        return Observation(now, None, killed=killed)
    state = JobState(submission_id="s", status=status)
    return Observation(now, state, status.is_terminal(), status.is_success(), log, killed)


@pytest.mark.parametrize(
    ("status", "action"),
    [
        (JobStatus.PENDING, None),
        (JobStatus.RUNNING, None),
        (JobStatus.SUCCEEDED, Ending.SUCCEEDED),
        (JobStatus.FAILED, Ending.FAILED),
        (JobStatus.STOPPED, Ending.FAILED),
    ],
)
def test_every_job_status_maps_to_one_action(status, action):
    decided = step(WaitPlan(start_time=START), _seen(status))
    assert decided.ending is action and not decided.stop_job and decided.message == ""


@pytest.mark.parametrize(
    ("missing_ok", "action", "message"),
    [(False, Ending.FAILED, "job not found"), (True, None, "")],
)
def test_a_missing_job_fails_unless_missing_is_ok(missing_ok, action, message):
    decided = step(WaitPlan(start_time=START, missing_ok=missing_ok, log_offset=7), _seen(None))
    assert (decided.ending, decided.message, decided.log_offset) == (action, message, 7)


@pytest.mark.parametrize(
    ("cleanup", "stops"), [(Cleanup.NEVER, False), (Cleanup.ON_EXCEPTION, True), (Cleanup.ALWAYS, True)]
)
@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING])
def test_a_live_job_past_its_timeout_times_out_and_is_stopped_as_cleanup_says(cleanup, stops, status):
    plan = WaitPlan(start_time=START, timeout=10, cleanup=cleanup)
    assert step(plan, _seen(status, now=START + 9.9)).ending is None
    decided = step(plan, _seen(status, now=START + 10))
    assert decided.ending is Ending.TIMED_OUT and decided.stop_job is stops
    assert "timeout of 10s" in decided.message


def test_a_finished_job_wins_over_its_timeout():
    plan = WaitPlan(start_time=START, timeout=10)
    assert step(plan, _seen(JobStatus.SUCCEEDED, now=START + 99)).ending is Ending.SUCCEEDED
    assert step(plan, _seen(JobStatus.FAILED, now=START + 99)).ending is Ending.FAILED


@pytest.mark.parametrize(
    ("cleanup", "ending", "stops"),
    [
        (Cleanup.NEVER, Ending.USER_KILL, False),
        (Cleanup.NEVER, Ending.WORKER_SIGTERM, False),
        (Cleanup.ON_EXCEPTION, Ending.USER_KILL, True),
        (Cleanup.ON_EXCEPTION, Ending.WORKER_SIGTERM, False),
        (Cleanup.ALWAYS, Ending.USER_KILL, True),
        (Cleanup.ALWAYS, Ending.WORKER_SIGTERM, True),
    ],
)
@pytest.mark.parametrize("status", [None, JobStatus.RUNNING, JobStatus.SUCCEEDED])
def test_a_kill_stops_the_wait_at_once_and_the_job_as_cleanup_says(cleanup, ending, stops, status):
    decided = step(WaitPlan(start_time=START, cleanup=cleanup), _seen(status, killed=ending))
    assert decided.ending is ending and decided.stop_job is stops
    assert ending.value in decided.message


@pytest.mark.parametrize(
    ("status", "log", "offset", "lines", "new_offset"),
    [
        (JobStatus.RUNNING, "a\nb\npart", 0, ("a", "b"), 4),  # a line still being written waits
        (JobStatus.RUNNING, "a\nb\npart", 4, (), 4),
        (JobStatus.SUCCEEDED, "a\nb\npart", 4, ("part",), 8),  # the final look writes the rest
        (JobStatus.FAILED, "a\n", 0, ("a",), 2),
        (JobStatus.RUNNING, None, 3, (), 3),  # the log could not be read: nothing written, offset kept
    ],
)
def test_log_lines_are_written_once_by_offset(status, log, offset, lines, new_offset):
    decided = step(WaitPlan(start_time=START, log_offset=offset), _seen(status, log=log))
    assert decided.lines == lines and decided.log_offset == new_offset


def test_not_streaming_writes_nothing():
    decided = step(WaitPlan(start_time=START, stream_logs=False), _seen(JobStatus.SUCCEEDED, log="a\nb\n"))
    assert decided.lines == () and decided.log_offset == 0


def test_the_step_is_pure():
    plan, seen = WaitPlan(start_time=START, timeout=1), _seen(JobStatus.RUNNING, now=START + 5, log="x\n")
    assert step(plan, seen) == step(plan, seen)
    assert plan.log_offset == 0

"""RayJobTrigger in an asyncio loop against the real head: timeout, cancellation, errors, log offset."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_ray_provider.jobs.logs import LOG_PREFIX
from airflow_ray_provider.jobs.status import JobStatus
from airflow_ray_provider.jobs.submission import JobSpec
from airflow_ray_provider.triggers.ray_job import RayJobTrigger
from tests.fixtures.ray_job import drop_connection, set_connection

pytestmark = pytest.mark.integration
LONG = JobSpec(entrypoint="python -c 'import time; time.sleep(120)'")


async def _first_event(trigger: RayJobTrigger) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("trigger ended without an event")


def _wait_status(hook, sid, wanted, timeout=90.0):
    deadline = time.monotonic() + timeout
    while (state := hook.get_job(sid)) is None or state.status is not wanted:
        assert time.monotonic() < deadline, f"{sid} never reached {wanted} (now {state})"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def long_jobs(ray_conn_id):
    """Three long jobs submitted at once (start-ups overlap), RUNNING when yielded, stopped after."""
    import uuid

    from airflow_ray_provider.hooks.ray_job import RayJobHook

    hook = RayJobHook(ray_conn_id, retry_attempts=3)
    names = ("timeout", "kill", "keep")
    sids = {name: f"rjtrig-{uuid.uuid4().hex[:8]}-{name}" for name in names}
    for sid in sids.values():
        hook.submit_job(LONG, sid)
    try:
        for sid in sids.values():
            _wait_status(hook, sid, JobStatus.RUNNING)
        yield sids
    finally:
        for sid in sids.values():
            hook.stop_job(sid)


def test_timeout_from_serialised_start_time_stops_the_job(
    long_jobs, ray_job_hook, ray_conn_id, ray_cluster_handle
):
    sid = long_jobs["timeout"]
    # The start time is in the past, as after a deferral: the timeout is already due.
    trigger = RayJobTrigger(
        submission_id=sid,
        cluster=ray_cluster_handle,
        poll_interval=0.2,
        timeout=5,
        start_time=time.time() - 10,
    )
    event = asyncio.run(_first_event(RayJobTrigger(**trigger.serialize()[1])))
    assert event["status"] == "timeout" and event["message"] == "stopped" and event["submission_id"] == sid
    _wait_status(ray_job_hook, sid, JobStatus.STOPPED)


def test_cancellation_stops_the_job_only_when_asked(long_jobs, ray_job_hook, ray_conn_id):
    async def run_then_kill(sid: str, stop: bool) -> None:
        trigger = RayJobTrigger(
            submission_id=sid, ray_conn_id=ray_conn_id, poll_interval=0.2, stop_on_cancel=stop
        )
        task = asyncio.create_task(_first_event(trigger))
        await asyncio.sleep(1.0)
        task.cancel()  # what the triggerer does when a user marks the task failed...
        with pytest.raises(asyncio.CancelledError):
            await task
        await trigger.on_kill()  # ...followed by on_kill()

    async def both():
        await asyncio.gather(run_then_kill(long_jobs["kill"], True), run_then_kill(long_jobs["keep"], False))

    asyncio.run(both())
    _wait_status(ray_job_hook, long_jobs["kill"], JobStatus.STOPPED)
    assert ray_job_hook.get_job(long_jobs["keep"]).status is JobStatus.RUNNING


def test_unreachable_dashboard_yields_an_error_event():
    from airflow_ray_provider.local.head import free_port

    set_connection("ray_trigger_down", host=f"http://127.0.0.1:{free_port()}", password="secret-token-abcdef")
    try:
        trigger = RayJobTrigger(submission_id="x", ray_conn_id="ray_trigger_down", retry_attempts=2)
        event = asyncio.run(_first_event(trigger))
    finally:
        drop_connection("ray_trigger_down")
    assert event["status"] == "error" and "RayDashboardUnreachableError" in event["message"]
    assert "ray_trigger_down" in event["message"] and "secret-token" not in event["message"]


def test_log_offset_resumes_where_the_last_poll_stopped(ray_job_hook, ray_conn_id, job_prefix, capfd):
    sid = f"{job_prefix}-logs"
    ray_job_hook.submit_job(
        JobSpec(entrypoint="python -c \"print('first'); print('second'); print('third')\""), sid
    )
    _wait_status(ray_job_hook, sid, JobStatus.SUCCEEDED)
    full = ray_job_hook.get_job_logs(sid)
    # Everything before the job's own "second" line was streamed before a deferral.
    offset = full.index("\nsecond\n") + 1
    event = asyncio.run(
        _first_event(RayJobTrigger(submission_id=sid, ray_conn_id=ray_conn_id, log_offset=offset))
    )
    out = capfd.readouterr().out
    streamed = [line for line in out.splitlines() if LOG_PREFIX in line]
    assert (
        event["status"] == "done"
        and event["job"]["status"] == "SUCCEEDED"
        and event["log_offset"] == len(full)
    )
    emitted = [line.split(LOG_PREFIX, 1)[1].split(" [airflow")[0].strip() for line in streamed]
    assert emitted == ["second", "third"]

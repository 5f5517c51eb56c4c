"""RayJobTrigger in an asyncio loop against the real head: timeout, cancellation, errors, log offset."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_ray_provider.hooks.ray_job import LOG_PREFIX, target_from_ref
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import JobSpec
from airflow_ray_provider.launch import Cleanup, JobRun
from airflow_ray_provider.launch.run import WaitPlan
from airflow_ray_provider.triggers.ray_job import RayJobTrigger
from tests.fixtures.ray_job import drop_connection, set_connection

pytestmark = pytest.mark.integration
LONG = JobSpec(entrypoint="python -c 'import time; time.sleep(120)'")


def _trigger(
    ref: dict, sid: str, *, start_time: float | None = None, log_offset: int = 0, **kwargs
) -> RayJobTrigger:
    """The trigger of a deferred run on ``ref``'s cluster watching ``sid``, as the operator hands it over."""
    run = JobRun(target_from_ref(ref), submission_id=sid, base_id=sid, **kwargs)
    plan = run.plan
    start = start_time or plan.start_time
    run.plan = WaitPlan(start, plan.timeout, log_offset, plan.stream_logs, plan.missing_ok, plan.cleanup)
    return RayJobTrigger(run=run.hand_over())


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

    hook = RayJobHook(ray_conn_id, retry_attempts=3).client
    names = ("timeout", "kill", "keep")
    sids = {name: f"rjtrig-{uuid.uuid4().hex[:8]}-{name}" for name in names}
    for sid in sids.values():
        hook.submit(LONG, sid)
    try:
        for sid in sids.values():
            _wait_status(hook, sid, JobStatus.RUNNING)
        yield sids
    finally:
        for sid in sids.values():
            hook.stop(sid)


def test_timeout_from_serialised_start_time_stops_the_job(
    long_jobs, ray_job_hook, ray_conn_id, ray_cluster_handle
):
    sid = long_jobs["timeout"]
    # The start time is in the past, as after a deferral: the timeout is already due.
    trigger = _trigger({"handle": ray_cluster_handle}, sid, poll_interval=0.2, timeout=5.0,
                       start_time=time.time() - 10)  # fmt: skip
    event = asyncio.run(_first_event(RayJobTrigger(**trigger.serialize()[1])))
    run = event["run"]
    assert event["error"] is None and run["step"]["ending"] == "timed_out" and run["stopped"] is True
    assert run["submission_id"] == sid
    _wait_status(ray_job_hook, sid, JobStatus.STOPPED)


def test_cancellation_stops_the_job_only_when_asked(long_jobs, ray_job_hook, ray_conn_id):
    async def run_then_kill(sid: str, stop: bool) -> None:
        cleanup = Cleanup.ON_EXCEPTION if stop else Cleanup.NEVER
        trigger = _trigger({"ray_conn_id": ray_conn_id}, sid, poll_interval=0.2, cleanup=cleanup)
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
    from airflow_ray_provider.local import free_port

    set_connection("ray_trigger_down", host=f"http://127.0.0.1:{free_port()}", password="secret-token-abcdef")
    try:
        trigger = _trigger({"ray_conn_id": "ray_trigger_down", "retry_attempts": 2}, "x")
        event = asyncio.run(_first_event(trigger))
    finally:
        drop_connection("ray_trigger_down")
    assert "RayDashboardUnreachableError" in event["error"]
    assert "ray_trigger_down" in event["error"] and "secret-token" not in event["error"]


def test_log_offset_resumes_where_the_last_poll_stopped(ray_job_hook, ray_conn_id, job_prefix, capfd):
    sid = f"{job_prefix}-logs"
    ray_job_hook.submit(
        JobSpec(entrypoint="python -c \"print('first'); print('second'); print('third')\""), sid
    )
    _wait_status(ray_job_hook, sid, JobStatus.SUCCEEDED)
    full = ray_job_hook.get_logs(sid)
    # Everything before the job's own "second" line was streamed before a deferral.
    offset = full.index("\nsecond\n") + 1
    event = asyncio.run(_first_event(_trigger({"ray_conn_id": ray_conn_id}, sid, log_offset=offset)))
    out = capfd.readouterr().out
    streamed = [line for line in out.splitlines() if LOG_PREFIX in line]
    run = event["run"]
    assert run["step"]["ending"] == "succeeded" and run["subject"]["status"] == "SUCCEEDED"
    assert run["log_offset"] == len(full)
    emitted = [line.split(LOG_PREFIX, 1)[1].split(" [airflow")[0].strip() for line in streamed]
    assert emitted == ["second", "third"]

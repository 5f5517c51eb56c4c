"""RayJobHook against the real local head: auth, errors that name the URL, sync and async paths."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_ray_provider.exceptions import RayDashboardUnreachableError, RayJobApiError
from airflow_ray_provider.hooks.ray_job import RayJobHook, target_from_ref
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import JobSpec
from tests.fixtures.ray_job import drop_connection, set_connection

pytestmark = pytest.mark.integration


def test_test_connection_with_token_and_without(ray_head, ray_conn_id):
    ok, message = RayJobHook(ray_conn_id).test_connection()
    assert ok and "Connected to Ray 2." in message
    set_connection("ray_no_token", host=ray_head.dashboard_url)
    try:
        ok, message = RayJobHook("ray_no_token", retry_attempts=1).test_connection()
    finally:
        drop_connection("ray_no_token")
    assert not ok and "401" in message and "auth token" in message


def test_unreachable_dashboard_names_url_and_connection():
    from airflow_ray_provider.local import free_port

    url = f"http://127.0.0.1:{free_port()}"
    set_connection("ray_down", host=url, password="not-a-real-token-123456")
    try:
        hook = RayJobHook("ray_down", retry_attempts=2, retry_max_wait=0.1).client
        started = time.monotonic()
        with pytest.raises(RayDashboardUnreachableError) as excinfo:
            hook.get_job("anything")
    finally:
        drop_connection("ray_down")
    err = excinfo.value
    assert err.url == url and err.conn_id == "ray_down"
    assert url in str(err) and "ray_down" in str(err) and "2 attempts" in str(err)
    assert "not-a-real-token" not in str(err)
    assert time.monotonic() - started < 10


def test_cluster_handle_with_token_file_and_permanent_errors(ray_cluster_handle):
    hook = target_from_ref({"handle": ray_cluster_handle, "retry_attempts": 3}).dashboard()
    assert hook.version().startswith("2.")
    assert hook.get_job("no-such-job-anywhere") is None
    assert hook.stop("no-such-job-anywhere") is False
    with pytest.raises(RayJobApiError) as excinfo:
        hook.get_logs("no-such-job-anywhere")
    assert excinfo.value.http_status == 404  # permanent: not retried, clear status


def test_async_path_reads_streams_and_stops_a_job(ray_job_hook, ray_conn_id, job_prefix):
    sid = f"{job_prefix}-async"
    ray_job_hook.submit(
        JobSpec(entrypoint="python -u -c \"import time; print('async-hello', flush=True); time.sleep(60)\""),
        sid,
    )

    async def scenario():
        hook = RayJobHook(ray_conn_id).client
        try:
            deadline = time.monotonic() + 60
            while "async-hello" not in await hook.aget_logs(sid):
                assert time.monotonic() < deadline, "job never printed"
                await asyncio.sleep(0.3)
            running = await hook.aget_job(sid)
            stopped = await hook.astop(sid)
            missing = await hook.aget_job("no-such-job-anywhere")
            return running, stopped, missing
        finally:
            await hook.aclose()

    running, stopped, missing = asyncio.run(scenario())
    assert running.status is JobStatus.RUNNING and stopped is True and missing is None
    deadline = time.monotonic() + 30
    while not (state := ray_job_hook.get_job(sid)).is_terminal and time.monotonic() < deadline:
        time.sleep(0.3)
    assert state.status is JobStatus.STOPPED
    assert sid in {job.submission_id for job in ray_job_hook.list_jobs()}


def test_kuberay_handle_resolves_token_from_its_secret(
    ray_head, ray_head_token, kuberay_conn, kuberay_client
):
    """A KubeRay handle refers to a Secret (Kubernetes is the kmock emulator; Ray is the real head)."""
    from airflow_ray_provider.launch import JobRun
    from airflow_ray_provider.triggers.ray_job import RayJobTrigger
    from tests.fixtures.kuberay import TEST_NAMESPACE

    secret = f"rj-token-{time.time_ns()}"
    kuberay_client.create_secret(secret, data={"auth_token": ray_head_token}, labels={})
    try:
        handle = {
            "backend": "kuberay", "name": "rc", "namespace": TEST_NAMESPACE, "conn_id": kuberay_conn,
            "dashboard_url": ray_head.dashboard_url, "auth_token_secret": secret,
            "auth_token_secret_key": "auth_token",
        }  # fmt: skip
        assert target_from_ref({"handle": handle}).dashboard().version().startswith("2.")
        target = target_from_ref({"handle": handle, "retry_attempts": 1})
        trigger = RayJobTrigger(run=JobRun(target, submission_id="no-such-job-anywhere").hand_over())

        async def first():
            async for event in trigger.run():
                return event.payload

        event = asyncio.run(first())  # the token was read off the event loop; auth passed (404, not 401)
    finally:
        kuberay_client.secrets.delete(secret)
    assert event["error"] is None and event["run"]["step"] == {"ending": "failed", "message": "job not found"}

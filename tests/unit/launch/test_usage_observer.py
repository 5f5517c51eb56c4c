"""The usage record as an observer of a run: when it is made, what it is asked with, its teardown."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_ray_provider.clusters import RayClusterHandle
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.kuberay import RayJobStatus
from airflow_ray_provider.launch import Cleanup, JobRun, UsageOptions
from airflow_ray_provider.launch.rayjob import RayJobLook
from airflow_ray_provider.launch.usage import observer
from tests.unit.launch.test_run import Scripted

pytestmark = pytest.mark.unit
T0 = 1_800_000_000.0


def _look(job_status: str, deployment: str, *, reason: str = "", job_id: str = "rj-abc") -> RayJobLook:
    status = RayJobStatus(
        name="rj", namespace="ns", deployment_status=deployment, job_status=job_status, job_id=job_id,
        cluster_name="rj-x1", start_time="2027-01-15T08:00:00Z", reason=reason,
    )  # fmt: skip
    return RayJobLook(
        status, RayClusterHandle(backend="kuberay", name="rj-x1", dashboard_url="http://h:8265")
    )


def test_a_rayjobs_record_is_due_when_its_ray_job_ends_before_kuberays_verdict():
    assert not _look("RUNNING", "Running").status.is_terminal
    assert _look("SUCCEEDED", "Running").status.is_terminal  # the cluster may go right after Complete
    assert _look("RUNNING", "Failed", reason="DeadlineExceeded").status.is_terminal
    assert not _look("", "Failed", job_id="").status.is_terminal  # no Ray job to make a record of


def test_a_rayjobs_request_names_its_ray_job_its_cluster_and_its_start():
    options = UsageOptions(mode="rayjob", cluster="rj", own_cluster=True, entrypoint={"CPU": 1.0})
    assert UsageOptions(**json.loads(json.dumps(dataclasses.asdict(options)))) == options  # it travels
    run = JobRun(Scripted(JobStatus.RUNNING), submission_id="rj", usage=options)
    run.subject = _look("SUCCEEDED", "Running")
    request = observer.request_of(run, options)
    assert request is not None
    assert (request.submission_id, request.cluster, request.mode, request.ended_by) == (
        "rj-abc", "rj-x1", "rayjob", "finished",
    )  # fmt: skip
    assert request.task_started == datetime(2027, 1, 15, 8, tzinfo=timezone.utc).timestamp()  # startTime
    run.subject = _look("RUNNING", "Failed", reason="DeadlineExceeded")
    deadline = observer.request_of(run, options)
    assert deadline is not None and deadline.ended_by == "timed_out"  # KubeRay's deadline


def test_the_run_makes_the_record_once_at_the_look_that_shows_the_end_and_adds_its_teardown(monkeypatch):
    made: list[Any] = []

    def record(run: JobRun) -> dict[str, Any]:
        made.append(run.subject.status)  # what the run had seen when it asked
        return {"phases": {"teardown_s": None}, "times": {"ended": T0}, "not_available": {"teardown": "x"}}

    monkeypatch.setattr(observer, "usage_record", record)
    target = Scripted(JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.SUCCEEDED, owned=True)
    options = UsageOptions(mode="one_task", cluster="c", own_cluster=True)
    with JobRun(target, job=object(), base_id="sid", cleanup=Cleanup.ALWAYS, poll_interval=0,  # type: ignore[arg-type]
                usage=options, on_lines=lambda _: None, say=lambda _: None) as run:  # fmt: skip
        run.reach()
        run.submit()
        run.wait()
        assert made == [JobStatus.SUCCEEDED]  # made during the wait, before the cluster is deleted
    assert made == [JobStatus.SUCCEEDED] and target.calls.count("delete") == 1
    assert run.record is not None and run.record["phases"]["teardown_s"] is not None
    assert "teardown" not in run.record["not_available"]  # measured once the run deleted its cluster


def _started_run(takes_cluster: bool) -> tuple[Scripted, JobRun]:
    """A run of a job that is running, on a target whose stop does or does not take its cluster."""
    target = Scripted(JobStatus.RUNNING)
    target.stop_takes_cluster = takes_cluster  # a RayJob's stop deletes its cluster; a Job API stop does not
    options = UsageOptions(mode="submit", cluster="c")
    run = JobRun(target, job=object(), base_id="sid", cleanup=Cleanup.ALWAYS, poll_interval=0,  # type: ignore[arg-type]
                 usage=options, on_lines=lambda _: None, say=lambda _: None)  # fmt: skip
    run.reach()
    run.submit()
    return target, run


@pytest.mark.parametrize("takes_cluster", [False, True])
def test_a_kill_reads_the_record_before_a_stop_that_takes_the_cluster_after_one_that_does_not(
    monkeypatch, takes_cluster
):
    from airflow_ray_provider.launch.run import Ending

    target, run = _started_run(takes_cluster)
    monkeypatch.setattr(observer, "usage_record", lambda run: target.calls.append("record") or {"x": 1})
    run.kill(Ending.USER_KILL)
    sequence = [call for call in target.calls if call in ("record", "stop")]
    assert sequence == (["record", "stop"] if takes_cluster else ["stop", "record"])


@pytest.mark.parametrize("takes_cluster", [False, True])
def test_a_triggers_kill_asks_for_the_record_as_a_kill(monkeypatch, takes_cluster):
    import asyncio

    from airflow_ray_provider.launch.run import Ending

    _, run = _started_run(takes_cluster)
    asked: list[str] = []

    def record(run: JobRun) -> dict[str, Any]:
        request = observer.request_of(run, run.usage)  # type: ignore[arg-type]
        asked.append(request.ended_by if request is not None else "")
        return {"x": 1}

    monkeypatch.setattr(observer, "usage_record", record)
    asyncio.run(run.akill(Ending.USER_KILL))
    assert asked == ["killed"]

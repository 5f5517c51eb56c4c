"""The usage record as an observer of a run: made once, by :func:`usage_record`, at the first look that
finds the job ended while its cluster still answers (KubeRay may delete a RayJob's cluster right after
its job), else when the run ends (a timeout, a kill, an error); the run adds its teardown.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.launch.cleanup import Ending
from airflow_ray_provider.launch.usage.dashboard import collect_usage
from airflow_ray_provider.launch.usage.record import UsageOptions

if TYPE_CHECKING:
    from airflow_ray_provider.launch.run import JobRun

#: How the record names each ending.
ENDED_BY = {Ending.TIMED_OUT: "timed_out", Ending.USER_KILL: "killed", Ending.WORKER_SIGTERM: "killed"}
#: A RayJob's deadlines, which KubeRay enforces (its record then says ``timed_out``).
DEADLINES = ("DeadlineExceeded", "PreRunningDeadlineExceeded")


def _epoch(stamp: str | None) -> float | None:
    """A Kubernetes timestamp (``2026-12-02T01:02:03Z``) in seconds since the epoch."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


def job_ended(subject: Any) -> bool:
    """Whether a look shows the Ray job ended (a RayJob's own status may follow a moment later)."""
    if isinstance(subject, JobState):
        return subject.is_terminal
    status = subject.status
    return bool(status.job_id) and (
        status.job_status in ("SUCCEEDED", "FAILED", "STOPPED") or status.is_final
    )


def request_of(run: JobRun, options: UsageOptions) -> UsageOptions | None:
    """``options`` with what the run knows of its job (``None``: no Ray job to ask about)."""
    subject, ended_by = run.subject, ENDED_BY.get(run.ending or Ending.SUCCEEDED, "finished")
    if isinstance(subject, JobState) or subject is None:
        sid, cluster, owned = run.submission_id, options.cluster, run.target.owned
        started = run.times.get("reach") if owned else None  # it waited for its own cluster
        ready = run.times.get("ready") if owned else None
    else:  # a RayJob: its Ray job and the cluster KubeRay made for it
        status = subject.status
        sid, cluster, ready = status.job_id, status.cluster_name or options.cluster, None
        started = _epoch(status.start_time)
        if status.reason in DEADLINES:
            ended_by = "timed_out"
    if not sid:
        return None
    return dataclasses.replace(options, submission_id=sid, cluster=cluster, task_started=started,
                               cluster_ready=ready, ended_by=ended_by)  # fmt: skip


def usage_record(run: JobRun) -> dict[str, Any] | None:
    """The record of ``run``'s job from its cluster's dashboard; ``None`` when it could not be made (the
    reason is said; the job's outcome stands)."""
    client = run.target.dashboard()
    request = request_of(run, run.usage) if run.usage is not None else None
    if client is None or request is None:
        run.say("No usage record: the job or its cluster's dashboard was never reached")
        return None
    try:
        return collect_usage(client.reader(), request)
    except Exception as exc:  # the record never hides the job's outcome
        run.say(f"Could not make the usage record of Ray job {request.submission_id}: {exc}")
        return None

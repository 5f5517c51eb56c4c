"""The usage record as an observer of a run: the run tells it what it saw (:func:`looked`), when it ends
(:func:`record`) and that it deleted its cluster (:func:`deleted`). The record is made once, at the first
look that finds the job ended while its cluster still answers (KubeRay may delete a RayJob's cluster
right after its job), else when the run ends (a timeout, a kill, an error).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.launch.cleanup import Ending
from airflow_ray_provider.launch.usage.dashboard import collect_usage
from airflow_ray_provider.launch.usage.record import UsageOptions, with_teardown

if TYPE_CHECKING:
    from airflow_ray_provider.launch.run import JobRun
    from airflow_ray_provider.launch.wait import Observation

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


def looked(run: JobRun, seen: Observation) -> bool:
    """Keep what ``seen`` shows; whether this look is the one ``run``'s record is made at: the first that
    shows the job ended."""
    run.subject = seen.subject if seen.subject is not None else run.subject
    ended = seen.subject is not None and job_ended(seen.subject)
    return ended and run.usage is not None and run.record is None


def record(run: JobRun, *, refresh: bool = False) -> None:
    """Make ``run``'s record once (``refresh``: the run ended before its wait did, a kill or an error: look
    at the job first, for what it is now)."""
    if run.usage is None or run.record is not None or not run.submission_id:
        return
    if refresh and run.last is None:
        with contextlib.suppress(Exception):
            run.subject = run.target.look(run.submission_id, with_log=False).subject or run.subject
    run.record = usage_record(run) or {}


def deleted(run: JobRun) -> None:
    """Add the teardown to ``run``'s record: the run's cluster is gone now."""
    if run.record:
        run.record = with_teardown(run.record, time.time())

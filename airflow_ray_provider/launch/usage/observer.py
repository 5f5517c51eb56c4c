"""The usage record as an observer of a run: one option in, one record out of the finished run.

A run asked for a record (:class:`UsageOptions`) makes it once, through :func:`usage_record`: at the
first look that finds its job ended, while the job's cluster still answers (KubeRay may delete a RayJob's
cluster right after its job), else when the run ends (a timeout, a kill, an error). The run adds the
teardown once it deleted its own cluster. The wait, the trigger and the operators carry nothing else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.launch.cleanup import Ending
from airflow_ray_provider.launch.usage.dashboard import collect_usage
from airflow_ray_provider.launch.usage.prices import parse_prices
from airflow_ray_provider.launch.usage.record import UsageRequest

if TYPE_CHECKING:
    from airflow_ray_provider.launch.run import JobRun

#: How the record names each ending.
ENDED_BY = {Ending.TIMED_OUT: "timed_out", Ending.USER_KILL: "killed", Ending.WORKER_SIGTERM: "killed"}
#: A RayJob's deadlines, which KubeRay enforces (its record then says ``timed_out``).
DEADLINES = ("DeadlineExceeded", "PreRunningDeadlineExceeded")


@dataclass(frozen=True)
class UsageOptions:
    """What a run's usage record needs besides the run (JSON-safe: it travels to a trigger).

    :param mode: how the job runs (``ephemeral``, ``standing``, ``one_task``, ``task_ray``, ``rayjob``).
    :param cluster: the cluster's name, as the task knows it.
    :param own_cluster: the cluster is the run's own (reserved is then the whole cluster).
    :param entrypoint: the entrypoint's reservation (Ray names: ``CPU``, ``GPU``, ``memory`` bytes, ...).
    :param prices: the checked price table as a dict (``Prices.to_dict()``), if any.
    :param teardown_note: why the record will have no ``teardown_s`` (``None``: the run measures it).
    """

    mode: str
    cluster: str
    own_cluster: bool = False
    entrypoint: dict[str, float] = field(default_factory=dict)
    prices: dict[str, Any] | None = None
    teardown_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> UsageOptions | None:
        """The options of :meth:`to_dict` (``None``: no record)."""
        return cls(**data) if data else None


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


def request_of(run: JobRun, options: UsageOptions) -> UsageRequest | None:
    """What the record of ``run``'s job is asked with (``None``: no Ray job to ask about)."""
    subject, ended_by = run.subject, ENDED_BY.get(run.ending or Ending.SUCCEEDED, "finished")
    if isinstance(subject, JobState) or subject is None:
        sid, cluster = run.submission_id, options.cluster
        started = run.times.get("reach") if run.target.owned else None  # it waited for its cluster
        ready = run.times.get("ready") if run.target.owned else None
    else:  # a RayJob: its Ray job and the cluster KubeRay made for it
        status = subject.status
        sid, cluster, started, ready = status.job_id, status.cluster_name or options.cluster, None, None
        started = _epoch(status.start_time)
        if status.reason in DEADLINES:
            ended_by = "timed_out"
    if not sid:
        return None
    return UsageRequest(
        submission_id=sid, cluster=cluster, mode=options.mode, own_cluster=options.own_cluster,
        entrypoint=options.entrypoint, prices=parse_prices(options.prices), task_started=started,
        cluster_ready=ready, ended_by=ended_by, teardown_note=options.teardown_note,
    )  # fmt: skip


def usage_record(run: JobRun) -> dict[str, Any] | None:
    """The record of ``run``'s job from its cluster's dashboard; ``None`` when it could not be made (the
    reason is said; the job's outcome stands)."""
    client = run.target.dashboard()
    request = request_of(run, run.usage) if run.usage is not None else None
    if client is None or request is None:
        run.say("No usage record: the job or its cluster's dashboard was never reached")
        return None
    try:
        return collect_usage(client.reader(), request).to_dict()
    except Exception as exc:  # the record never hides the job's outcome
        run.say(f"Could not make the usage record of Ray job {request.submission_id}: {exc}")
        return None

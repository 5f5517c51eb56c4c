"""A KubeRay RayJob: look at it through the same step function as a Ray job (sync or async).

KubeRay itself enforces the RayJob's deadline (``activeDeadlineSeconds``) and its cluster's deletion, so
the wait has no timeout of its own. A look that finds the RayJob gone ends the wait (``job not found``).
The job's log comes through its cluster's dashboard once the head answers; the shell supplies how
(``read_logs``), because only it may build an Airflow hook. :class:`RayJobUsage` makes the job's usage
record along the same looks (the shell supplies the dashboard's state API).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.launch.cleanup import Cleanup
from airflow_ray_provider.launch.transport import WaitOutcome, wait_async, wait_blocking
from airflow_ray_provider.launch.wait import Observation, WaitPlan

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayJobLook
    from airflow_ray_provider.launch.usage import DashboardState, UsageRequest


def rayjob_plan(*, log_offset: int = 0, stream_logs: bool = True) -> WaitPlan:
    """The wait for a RayJob: no timeout here (KubeRay's deadline), nothing to stop on the way out."""
    return WaitPlan(
        start_time=time.time(), log_offset=log_offset, stream_logs=stream_logs, cleanup=Cleanup.NEVER
    )


def _seen(look: RayJobLook | None, text: str | None) -> Observation[RayJobLook]:
    if look is None:
        return Observation(time.time())
    return Observation(time.time(), look, look.status.is_final, look.status.is_success, text)


def wait_for_rayjob(
    plan: WaitPlan,
    *,
    look: Callable[[], RayJobLook | None],
    read_logs: Callable[[RayJobLook], str | None],
    emit: Callable[[list[str]], None],
    poll_interval: float,
) -> WaitOutcome[RayJobLook]:
    """Wait in this process until KubeRay is done with the RayJob.

    :param look: one look (``None`` when the RayJob is gone).
    :param read_logs: the job's log so far (``None`` while it cannot be read).
    """

    def observe(p: WaitPlan) -> Observation[RayJobLook]:
        seen = look()
        return _seen(seen, read_logs(seen) if seen is not None and p.stream_logs else None)

    return wait_blocking(plan, observe, emit=emit, stop_job=lambda: False, poll_interval=poll_interval)


async def await_rayjob(
    plan: WaitPlan,
    *,
    look: Callable[[], Awaitable[RayJobLook | None]],
    read_logs: Callable[[RayJobLook], Awaitable[str | None]],
    emit: Callable[[list[str]], None],
    poll_interval: float,
) -> WaitOutcome[RayJobLook]:
    """:func:`wait_for_rayjob` on an event loop."""

    async def observe(p: WaitPlan) -> Observation[RayJobLook]:
        seen = await look()
        return _seen(seen, await read_logs(seen) if seen is not None and p.stream_logs else None)

    async def stop() -> bool:
        return False

    return await wait_async(plan, observe, emit=emit, stop_job=stop, poll_interval=poll_interval)


# ----------------------------------------------------------------- the usage record of a RayJob
#: Ray's terminal job statuses as KubeRay mirrors them into ``status.jobStatus``.
TERMINAL_JOB_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")
#: Seconds a RayJob wait goes on looking, after KubeRay is done, for the cluster to be gone (TTL 0 only),
#: to measure the teardown.
TEARDOWN_WAIT_S = 30.0


def _epoch(stamp: str | None) -> float | None:
    """A Kubernetes timestamp (``2026-12-02T01:02:03Z``) in seconds since the epoch."""
    if not stamp:
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class RayJobUsagePlan:
    """What a RayJob wait needs to make the job's usage record; JSON-safe (it travels to the trigger).

    :param own_cluster: KubeRay made the cluster for this RayJob (else a standing one, ``clusterSelector``).
    :param entrypoint: the entrypoint's reservation (Ray names).
    :param prices: the checked price table as a dict (``Prices.to_dict()``), if any.
    :param teardown_wait: seconds to look on for the cluster to be gone after KubeRay is done (0: not).
    :param teardown_note: why the record will have no ``teardown_s`` (``None``: it is measured).
    """

    own_cluster: bool
    entrypoint: dict[str, float] = field(default_factory=dict)
    prices: dict[str, Any] | None = None
    teardown_wait: float = 0.0
    teardown_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-safe kwargs."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RayJobUsagePlan | None:
        """The plan of :meth:`to_dict` (``None``: no record)."""
        return cls(**data) if data else None


@dataclass
class RayJobUsage:
    """The usage record along one RayJob wait (operator and trigger alike; no I/O of its own).

    The record is made at the first look that finds the Ray job terminal while the task still has a
    handle to the cluster's dashboard: KubeRay deletes the cluster ``ttlSecondsAfterFinished`` after
    the job, so the record cannot wait for the RayJob to be ``Complete``.

    :param plan: what the record needs.
    :param cluster_ready: the first look that found the head ready after one that did not.
    :param record: the record's dict once made.
    """

    plan: RayJobUsagePlan
    cluster_ready: float | None = None
    record: dict[str, Any] | None = None
    _saw_unready: bool = False

    def seen(self, look: RayJobLook, now: float) -> None:
        """Note when the cluster became ready (only a look that saw it not ready yet can tell)."""
        if look.cluster is None and not look.status.is_final:
            self._saw_unready = True
        elif look.cluster is not None and self._saw_unready and self.cluster_ready is None:
            self.cluster_ready = now

    def due(self, look: RayJobLook) -> bool:
        """Whether to make the record now: not made yet, and the Ray job (or the RayJob) has ended."""
        return (
            self.record is None
            and bool(look.status.job_id)
            and (look.status.job_status in TERMINAL_JOB_STATUSES or look.status.is_final)
        )

    def request(self, look: RayJobLook, ended_by: str | None = None) -> UsageRequest:
        """What the record of this RayJob's job is asked with (``ended_by``: default from the status:
        KubeRay's deadlines are ``timed_out``, else ``finished``)."""
        from airflow_ray_provider.launch.usage import UsageRequest, parse_prices

        status = look.status
        deadline = status.reason in ("DeadlineExceeded", "PreRunningDeadlineExceeded")
        ended_by = ended_by or ("timed_out" if deadline else "finished")
        return UsageRequest(
            submission_id=status.job_id, cluster=status.cluster_name or status.name, mode="rayjob",
            own_cluster=self.plan.own_cluster, entrypoint=self.plan.entrypoint,
            prices=parse_prices(self.plan.prices), task_started=_epoch(status.start_time),
            cluster_ready=self.cluster_ready, ended_by=ended_by, teardown_note=self.plan.teardown_note,
        )  # fmt: skip

    def collect(self, state: DashboardState, look: RayJobLook, ended_by: str | None = None) -> dict[str, Any]:
        """Make the record from the cluster's dashboard (blocking HTTP: the trigger runs it in a thread)."""
        from airflow_ray_provider.launch.usage import collect_usage

        self.record = collect_usage(state, self.request(look, ended_by)).to_dict()
        return self.record

    def teardown_pending(self, look: RayJobLook | None) -> bool:
        """Whether to look on for the cluster to go: a record to complete, the cluster still there."""
        return (
            bool(self.record) and self.plan.teardown_wait > 0 and look is not None
            and not look.cluster_gone and "teardown_s" not in self._measured()
        )  # fmt: skip

    def _measured(self) -> dict[str, Any]:
        phases = (self.record or {}).get("phases") or {}
        return {k: v for k, v in phases.items() if v is not None}

    def gone(self, look: RayJobLook | None, now: float) -> None:
        """A look found the cluster gone: the teardown ends here (an upper bound by one poll)."""
        from airflow_ray_provider.launch.usage import with_teardown

        ended = self.record and look is not None and look.cluster_gone and self.plan.own_cluster
        if ended and self.record and "teardown_s" not in self._measured():
            self.record = with_teardown(self.record, now)

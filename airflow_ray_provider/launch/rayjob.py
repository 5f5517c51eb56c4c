"""A KubeRay RayJob: look at it through the same step function as a Ray job (sync or async).

KubeRay itself enforces the RayJob's deadline (``activeDeadlineSeconds``) and its cluster's deletion, so
the wait has no timeout of its own. A look that finds the RayJob gone ends the wait (``job not found``).
The job's log comes through its cluster's dashboard once the head answers: :class:`RayJobWatch` keeps
the Job API client of that cluster, which the shell supplies (``connect``), because only it may build an
Airflow hook; ``launch.run`` connects with its own client. :class:`RayJobUsage` makes the job's usage
record along the same looks (the shell supplies the dashboard's state API), its busy CPU sampled at each
look while the Ray job runs (:meth:`RayJobWatch.sample_busy`, the same step as :mod:`.usage.busy`'s) and,
when looks are further apart than :data:`~.usage.busy.SAMPLE_INTERVAL_S`, between them too
(:meth:`RayJobWatch.sampling` from a thread, :meth:`RayJobWatch.asampling` from an ``asyncio`` task).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from airflow_ray_provider.launch.cleanup import Cleanup
from airflow_ray_provider.launch.transport import WaitOutcome, wait_async, wait_blocking
from airflow_ray_provider.launch.usage.busy import SAMPLE_INTERVAL_S
from airflow_ray_provider.launch.wait import Observation, WaitPlan

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import KubeRayJobs, RayClusterHandle, RayJobLook
    from airflow_ray_provider.launch.usage import BusyLedger, DashboardState, UsageRequest


class RayJobWatch:
    """What a wait for a RayJob carries between looks (operator, trigger and ``launch.run`` alike).

    The Job API client of its cluster's dashboard (made again when the cluster changes: ``backoffLimit``
    retries run on new clusters), the job's log so far, the last status line logged, and the usage record.

    :param log: where status lines go (``log.info`` / ``log.debug``, ``%``-style).
    :param connect: the Job API client of a cluster handle (an Airflow hook, or a ``JobApiClient``).
    :param usage: what the usage record needs (``None``: no record; the client must then offer
        ``dashboard_state()``).
    """

    def __init__(
        self, log: Any, connect: Callable[[RayClusterHandle], Any], usage: RayJobUsagePlan | None = None
    ) -> None:
        self.log = log
        self.connect = connect
        self.client: Any = None
        self.last_cluster: RayClusterHandle | None = None
        self.text = ""
        self.summary = ""
        self.usage = RayJobUsage(usage) if usage is not None else None
        self.last: RayJobLook | None = None
        #: Clients of clusters a later look replaced, for the caller to close (async ones on its loop).
        self.retired: list[Any] = []
        #: Held while the busy ledger is sampled or read into the record (looks and the sampler's thread).
        self._busy_lock = threading.Lock()

    def usage_due(self, look: RayJobLook) -> bool:
        """Whether this look should make the usage record (the Ray job ended; a dashboard to ask)."""
        return self.usage is not None and self.client is not None and self.usage.due(look)

    def collect_usage(self, look: RayJobLook, ended_by: str | None = None) -> None:
        """Make the usage record from the cluster's dashboard (blocking: the trigger runs it in a thread).
        Best effort: a failure is logged, never raised."""
        if self.usage is None or self.client is None:
            return
        try:
            with self._busy_lock:
                self.usage.collect(self.client.dashboard_state(), look, ended_by)
        except Exception as exc:
            self.log.warning("Could not make the usage record of RayJob %s: %s", look.status.name, exc)
            self.usage.record = {}  # tried: not again at every look

    def sample_busy(self, look: RayJobLook) -> None:
        """One sample of the job's process CPU (the record's ``busy``), at each look while the Ray job
        runs and the record is not made yet (blocking: the trigger's looks run in a thread). Never raises:
        a failed read is counted in the ledger."""
        if self.usage is None or self.client is None or self.usage.record is not None:
            return
        if not look.status.job_id:
            return
        from airflow_ray_provider.launch.usage.busy import read_dump

        try:
            body, why = read_dump(self.client.dashboard_state())
        except Exception as exc:
            body, why = None, f"no dashboard to sample: {exc}"
        with self._busy_lock:
            if self.usage.record is None:  # the record may have been made meanwhile (the sampler's thread)
                self.usage.ledger(look).take(body, why)

    def sample_latest(self) -> None:
        """:meth:`sample_busy` for the last look (the sampler's step between looks; never raises)."""
        if self.last is not None:
            self.sample_busy(self.last)

    @contextmanager
    def sampling(self, poll_interval: float, interval: float = SAMPLE_INTERVAL_S) -> Iterator[None]:
        """While the block waits: sample busy CPU every ``interval`` seconds from a thread, when looks are
        further apart (``poll_interval``) and a record is asked for; else nothing."""
        from airflow_ray_provider.launch.usage.busy import repeating

        if self.usage is None or poll_interval <= interval:
            yield
            return
        with repeating(self.sample_latest, interval=interval):
            yield

    @asynccontextmanager
    async def asampling(
        self, poll_interval: float, interval: float = SAMPLE_INTERVAL_S
    ) -> AsyncIterator[None]:
        """:meth:`sampling` on an event loop (a trigger's wait)."""
        from airflow_ray_provider.launch.usage.busy import arepeating

        if self.usage is None or poll_interval <= interval:
            yield
            return
        async with arepeating(self.sample_latest, interval=interval):
            yield

    @property
    def record(self) -> dict[str, Any] | None:
        """The usage record, once made."""
        return (self.usage.record or None) if self.usage is not None else None

    def seen(self, look: RayJobLook) -> Any:
        """Take in a look; the client it replaced when the cluster is new (to close), else ``None``."""
        self.last = look
        if self.usage is not None:
            self.usage.seen(look, time.time())
            self.usage.gone(look, time.time())
        replaced = None
        if look.cluster is not None and (self.client is None or self.last_cluster != look.cluster):
            replaced = self.client
            self.client = self.connect(look.cluster)
            self.last_cluster = look.cluster
        if look.status.summary() != self.summary:
            self.summary = look.status.summary()
            self.log.info("RayJob %s/%s: %s", look.status.namespace, look.status.name, self.summary)
        return replaced

    def read(self, look: RayJobLook) -> str | None:
        """The job's log, best effort (not submitted yet, or its cluster going away: ``None``)."""
        if self.client is None or not look.status.job_id:
            return None
        try:
            self.text = self.client.get_job_logs(look.status.job_id)
        except Exception as exc:
            self.log.debug("No log of Ray job %s yet: %s", look.status.job_id, exc)
            return None
        return self.text

    async def aread(self, look: RayJobLook) -> str | None:
        """:meth:`read` on an event loop (the client has ``aget_job_logs``)."""
        if self.client is None or not look.status.job_id:
            return None
        try:
            self.text = await self.client.aget_job_logs(look.status.job_id)
        except Exception as exc:
            self.log.debug("No log of Ray job %s yet: %s", look.status.job_id, exc)
            return None
        return self.text

    def cluster(self, look: RayJobLook) -> RayClusterHandle | None:
        """Its cluster, or the one last seen (KubeRay may have deleted it already: TTL 0)."""
        return look.cluster or self.last_cluster

    def look(
        self, jobs: KubeRayJobs, name: str, *, namespace: str, template: str | None
    ) -> RayJobLook | None:
        """One look at the RayJob, taken in, with the usage record made when it is due (blocking: the
        trigger runs it in a thread). ``None``: the RayJob is gone. A client the look replaced (a new
        cluster) waits in :attr:`retired` for the caller to close."""
        from airflow_ray_provider.kuberay import KubeRayNotFoundError

        try:
            seen = jobs.look(name, namespace=namespace, template=template)
        except KubeRayNotFoundError:
            return None
        replaced = self.seen(seen)
        if replaced is not None:
            self.retired.append(replaced)
        self.sample_busy(seen)
        if self.usage_due(seen):
            self.collect_usage(seen)
        return seen

    def until_cluster_gone(
        self, final: RayJobLook, look: Callable[[], RayJobLook | None], poll_interval: float
    ) -> None:
        """Look on (a bounded while) until KubeRay deleted the cluster, for the record's teardown (the
        blocking driver of :meth:`RayJobUsage.teardown_delay`)."""
        started, current = time.monotonic(), cast("RayJobLook | None", final)
        while (delay := self.teardown_delay(current, started, poll_interval)) is not None:
            time.sleep(delay)
            current = look()

    async def auntil_cluster_gone(
        self, final: RayJobLook, look: Callable[[], Awaitable[RayJobLook | None]], poll_interval: float
    ) -> None:
        """:meth:`until_cluster_gone` on an event loop."""
        import asyncio

        started, current = time.monotonic(), cast("RayJobLook | None", final)
        while (delay := self.teardown_delay(current, started, poll_interval)) is not None:
            await asyncio.sleep(delay)
            current = await look()

    def teardown_delay(self, look: RayJobLook | None, started: float, poll_interval: float) -> float | None:
        """Seconds until the next look for the cluster to go, ``None`` to stop (no record: at once).
        See :meth:`RayJobUsage.teardown_delay`."""
        if self.usage is None:
            return None
        return self.usage.teardown_delay(look, time.monotonic() - started, poll_interval)


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
    #: The job's process CPU samples, one per look while it runs (``None``: none taken yet).
    busy: BusyLedger | None = None
    _saw_unready: bool = False
    _looked_at: float | None = None

    def ledger(self, look: RayJobLook) -> BusyLedger:
        """The busy ledger, begun at the RayJob's start (else now) on first use."""
        from airflow_ray_provider.launch.usage import BusyLedger

        if self.busy is None:
            self.busy = BusyLedger(since=_epoch(look.status.start_time) or time.time())
        return self.busy

    def seen(self, look: RayJobLook, now: float) -> None:
        """Note when the cluster became ready (only a look that saw it not ready yet can tell)."""
        self._looked_at = now
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

        self.record = collect_usage(state, self.request(look, ended_by), busy=self.busy).to_dict()
        if self._looked_at is not None:  # the look that found the job ended may find the cluster gone
            self.gone(look, self._looked_at)  # too (TTL 0, a quick controller): no later look would
        return self.record

    def teardown_pending(self, look: RayJobLook | None) -> bool:
        """Whether to look on for the cluster to go: a record to complete, the cluster still there."""
        return (
            bool(self.record) and self.plan.teardown_wait > 0 and look is not None
            and not look.cluster_gone and "teardown_s" not in self._measured()
        )  # fmt: skip

    def teardown_delay(self, look: RayJobLook | None, waited: float, poll_interval: float) -> float | None:
        """The one step of the wait for the cluster to go: seconds until the next look, ``None`` to stop
        (no record to complete, the cluster gone, the teardown measured, or ``teardown_wait`` spent).

        :param look: the last look (``None``: the RayJob is gone).
        :param waited: seconds looked on so far.
        :param poll_interval: the wait's seconds between looks (at most 1 s here: the teardown is short).
        """
        if not self.teardown_pending(look) or waited >= self.plan.teardown_wait:
            return None
        return min(poll_interval, 1.0)

    def _measured(self) -> dict[str, Any]:
        phases = (self.record or {}).get("phases") or {}
        return {k: v for k, v in phases.items() if v is not None}

    def gone(self, look: RayJobLook | None, now: float) -> None:
        """A look found the cluster gone: the teardown ends here (an upper bound by one poll)."""
        from airflow_ray_provider.launch.usage import with_teardown

        ended = self.record and look is not None and look.cluster_gone and self.plan.own_cluster
        if ended and self.record and "teardown_s" not in self._measured():
            self.record = with_teardown(self.record, now)

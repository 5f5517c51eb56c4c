"""A KubeRay RayJob: look at it through the same step function as a Ray job (sync or async).

KubeRay itself enforces the RayJob's deadline (``activeDeadlineSeconds``) and its cluster's deletion, so
the wait has no timeout of its own. A look that finds the RayJob gone ends the wait (``job not found``).
The job's log comes through its cluster's dashboard once the head answers: :class:`RayJobWatch` keeps
the Job API client of that cluster, which the shell supplies (``connect``), because only it may build an
Airflow hook; ``launch.run`` connects with its own client.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.launch.cleanup import Cleanup
from airflow_ray_provider.launch.transport import WaitOutcome, wait_async, wait_blocking
from airflow_ray_provider.launch.wait import Observation, WaitPlan

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayClusterHandle, RayJobLook


class RayJobWatch:
    """What a wait for a RayJob carries between looks (operator, trigger and ``launch.run`` alike).

    The Job API client of its cluster's dashboard (made again when the cluster changes: ``backoffLimit``
    retries run on new clusters), the job's log so far, and the last status line logged.

    :param log: where status lines go (``log.info`` / ``log.debug``, ``%``-style).
    :param connect: the Job API client of a cluster handle (an Airflow hook, or a ``JobApiClient``).
    """

    def __init__(self, log: Any, connect: Callable[[RayClusterHandle], Any]) -> None:
        self.log = log
        self.connect = connect
        self.client: Any = None
        self.last_cluster: RayClusterHandle | None = None
        self.text = ""
        self.summary = ""

    def seen(self, look: RayJobLook) -> Any:
        """Take in a look; the client it replaced when the cluster is new (to close), else ``None``."""
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

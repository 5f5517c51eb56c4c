"""A KubeRay RayJob: look at it through the same step function as a Ray job (sync or async).

KubeRay itself enforces the RayJob's deadline (``activeDeadlineSeconds``) and its cluster's deletion, so
the wait has no timeout of its own. A look that finds the RayJob gone ends the wait (``job not found``).
The job's log comes through its cluster's dashboard once the head answers; the shell supplies how
(``read_logs``), because only it may build an Airflow hook.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from airflow_ray_provider.launch.cleanup import Cleanup
from airflow_ray_provider.launch.transport import WaitOutcome, wait_async, wait_blocking
from airflow_ray_provider.launch.wait import Observation, WaitPlan

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayJobLook


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

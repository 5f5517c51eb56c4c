"""The two drivers of :func:`~airflow_ray_provider.launch.wait.step`: blocking (workers, the CLI) and async.

Each one looks (``observe``), asks the step what to do, writes the step's log lines (``emit``), stops
the job when the step says so (``stop_job``) and sleeps between looks. Nothing else: no rule lives here,
so the two cannot drift apart (the model is Airflow's ``await_pod_start(pod_manager | async_pod_manager)``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from airflow_ray_provider.launch.wait import Action, Observation, Step, WaitPlan, step

T = TypeVar("T")


@dataclass(frozen=True)
class WaitOutcome(Generic[T]):
    """How a wait ended.

    :param step: the last step (never ``WAIT``).
    :param seen: the last look (its ``subject`` is the job's last state).
    :param plan: the plan with the final log offset.
    :param stopped: whether the job was stopped on the way out (and was still running).
    """

    step: Step
    seen: Observation[T]
    plan: WaitPlan
    stopped: bool = False


def wait_blocking(
    plan: WaitPlan,
    observe: Callable[[WaitPlan], Observation[T]],
    *,
    emit: Callable[[list[str]], None],
    stop_job: Callable[[], bool],
    poll_interval: float,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitOutcome[T]:
    """Look, decide, write, sleep, until the step ends the wait."""
    while True:
        seen = observe(plan)
        decided = step(plan, seen)
        emit(list(decided.lines))
        plan = plan.advanced(decided.log_offset)
        if decided.action is not Action.WAIT:
            stopped = stop_job() if decided.stop_job else False
            return WaitOutcome(decided, seen, plan, stopped)
        sleep(poll_interval)


async def wait_async(
    plan: WaitPlan,
    observe: Callable[[WaitPlan], Awaitable[Observation[T]]],
    *,
    emit: Callable[[list[str]], None],
    stop_job: Callable[[], Awaitable[bool]],
    poll_interval: float,
) -> WaitOutcome[T]:
    """:func:`wait_blocking` for an event loop (never blocks it)."""
    while True:
        seen = await observe(plan)
        decided = step(plan, seen)
        emit(list(decided.lines))
        plan = plan.advanced(decided.log_offset)
        if decided.action is not Action.WAIT:
            stopped = await stop_job() if decided.stop_job else False
            return WaitOutcome(decided, seen, plan, stopped)
        await asyncio.sleep(poll_interval)


def now() -> float:
    """Epoch seconds (the clock every observation carries)."""
    return time.time()

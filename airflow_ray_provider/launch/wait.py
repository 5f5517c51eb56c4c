"""Waiting, written once: one pure :func:`step` from what was seen to what to do next, driven by
:func:`poll` (blocking) or :func:`apoll` (``await``), which own nothing but the sleeping (Airflow's
``await_pod_start(pod_manager | async_pod_manager)``). A cluster's readiness wait uses the same drivers.
Also here: the cleanup table (:func:`actions_for`), what a run leaves behind at each way it ends. No Airflow
or Ray imports.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_ray_provider.clusters import event_for
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.jobs.outcome import new_log_lines

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import (
        ClusterBackend,
        ClusterPlan,
        RayClusterHandle,
        ReadinessCheck,
        ReadinessEvent,
    )

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Cleanup(str, enum.Enum):
    """What a run cleans up when it ends: one of three words (dagster-ray's ``Lifecycle.cleanup``), whose
    table is :func:`actions_for` (docs/launch.md, "Cleanup"). "cluster" is only ever one the run created;
    a KubeRay RayJob is the job (stopping it deletes or suspends it)."""

    NEVER = "never"
    ON_EXCEPTION = "on_exception"
    ALWAYS = "always"

    @classmethod
    def parse(cls, value: str | Cleanup) -> Cleanup:
        """The member for ``value``; :class:`RayInvalidInputError` naming the field and the words."""
        try:
            return cls(value)
        except ValueError:
            words = ", ".join(repr(m.value) for m in cls)
            raise RayInvalidInputError(f"cleanup must be one of {words}, got {value!r}") from None


class Ending(str, enum.Enum):
    """How a run stopped waiting for its job (a wait's :class:`Step` ends with one)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    USER_KILL = "user_kill"
    WORKER_SIGTERM = "worker_sigterm"


@dataclass(frozen=True)
class CleanupActions:
    """What to do at one ending: stop the job if it still runs, delete the cluster the run created."""

    stop_job: bool
    delete_cluster: bool


def actions_for(cleanup: Cleanup, ending: Ending) -> CleanupActions:
    """The row of the table for ``cleanup`` at ``ending``."""
    if cleanup is Cleanup.NEVER:
        return CleanupActions(stop_job=False, delete_cluster=False)
    if ending in (Ending.SUCCEEDED, Ending.FAILED):
        return CleanupActions(stop_job=False, delete_cluster=True)
    if ending in (Ending.TIMED_OUT, Ending.USER_KILL) or cleanup is Cleanup.ALWAYS:
        return CleanupActions(stop_job=True, delete_cluster=True)
    return CleanupActions(stop_job=False, delete_cluster=False)  # ON_EXCEPTION at a worker's SIGTERM


@dataclass(frozen=True)
class WaitPlan:
    """What a wait needs to decide (JSON-safe: it travels to a trigger).

    :param start_time: epoch seconds the timeout counts from (the job's start); ``timeout`` ``None``: no end.
    :param log_offset: characters of the job's log already written.
    :param missing_ok: keep waiting while the job does not exist (yet); otherwise that fails the wait.
    :param cleanup: what a timeout or a kill does to a live job.
    """

    start_time: float
    timeout: float | None = None
    log_offset: int = 0
    stream_logs: bool = True
    missing_ok: bool = False
    cleanup: Cleanup = Cleanup.ON_EXCEPTION


@dataclass(frozen=True)
class Observation:
    """One look at the job, at epoch seconds ``now``.

    :param subject: what was seen (a ``JobState``, a ``RayJobLook``); ``None`` when the job was not found.
    :param log_text: its whole log so far; ``None`` when it was not read.
    :param killed: the task was killed while it waited (how).
    """

    now: float
    subject: Any = None
    terminal: bool = False
    succeeded: bool = False
    log_text: str | None = None
    killed: Ending | None = None


@dataclass(frozen=True)
class Step:
    """The decision for one look: the wait's ``ending`` (``None``: keep waiting), the new complete log
    ``lines`` to write now and the ``log_offset`` after them, whether to stop the job first (a timeout or a
    kill, as ``cleanup`` says), and why the wait ended (``FAILED`` without a job, ``TIMED_OUT``, a kill)."""

    ending: Ending | None
    lines: tuple[str, ...] = field(default=())
    log_offset: int = 0
    stop_job: bool = False
    message: str = ""


def step(plan: WaitPlan, seen: Observation) -> Step:
    """Decide what to do after one look (pure: the same plan and look always give the same step)."""
    if seen.killed is not None:
        stop = actions_for(plan.cleanup, seen.killed).stop_job
        return Step(seen.killed, (), plan.log_offset, stop, f"the task was killed ({seen.killed.value})")
    if seen.subject is None:
        if plan.missing_ok:
            return Step(None, (), plan.log_offset)
        return Step(Ending.FAILED, (), plan.log_offset, message="job not found")
    lines: list[str] = []
    offset = plan.log_offset
    if plan.stream_logs and seen.log_text is not None:
        lines, offset = new_log_lines(seen.log_text, plan.log_offset, final=seen.terminal)
    if seen.terminal:
        return Step(Ending.SUCCEEDED if seen.succeeded else Ending.FAILED, tuple(lines), offset)
    if plan.timeout is not None and seen.now >= plan.start_time + plan.timeout:
        stop = actions_for(plan.cleanup, Ending.TIMED_OUT).stop_job
        message = f"ran past its timeout of {plan.timeout:g}s"
        return Step(Ending.TIMED_OUT, tuple(lines), offset, stop, message)
    return Step(None, tuple(lines), offset)


def poll(look: Callable[[], T], decide: Callable[[T], R | None], *, interval: float) -> R:
    """Look and decide until the decision is not ``None`` (blocking: workers, the CLI)."""
    while (decided := decide(look())) is None:
        time.sleep(interval)
    return decided


async def apoll(look: Callable[[], Awaitable[T]], decide: Callable[[T], R | None], *, interval: float) -> R:
    """:func:`poll` on an event loop (the triggerer): never blocks it."""
    while (decided := decide(await look())) is None:
        await asyncio.sleep(interval)
    return decided


def ready_handle(backend: ClusterBackend, plan: ClusterPlan, event: ReadinessEvent) -> RayClusterHandle:
    """The handle of a cluster whose wait ended ``ready``; else :class:`RayClusterNotReadyError` with its
    conditions (the caller's cleanup deletes what it created)."""
    if event["status"] != "ready" or not event["dashboard_url"]:
        message = event["message"] or f"Ray cluster {plan.name} is not ready ({event['status']})"
        raise RayClusterNotReadyError(message, name=plan.name, namespace=plan.namespace,
                                      conditions=event["conditions"])  # fmt: skip
    return backend.handle(plan, event["dashboard_url"])


def readiness_rule(
    check: ReadinessCheck, *, started: float, timeout: float, logger: Any = log
) -> ReadinessEvent | None:
    """The decision after one readiness look (the blocking wait's and the trigger's): its event, or
    ``None`` (logged) while the cluster is not ready and ``timeout`` seconds from epoch ``started`` last."""
    event = event_for(check, waited=time.time() - started, timeout=timeout)
    if event is None:
        logger.info("%s not ready yet: %s", check.cluster, check.message)
    return event


def wait_until_ready(
    backend: ClusterBackend,
    plan: ClusterPlan,
    *,
    timeout: float,
    poll_interval: float,
    on_look: Callable[[], None] = lambda: None,
) -> RayClusterHandle:
    """Look until the cluster answers, fails, or ``timeout`` seconds pass; its handle (see
    :func:`ready_handle`). ``on_look`` runs before each look (a pool's heartbeat)."""

    def look() -> ReadinessCheck:
        on_look()
        return backend.check(plan)

    decide = partial(readiness_rule, started=time.time(), timeout=timeout)
    return ready_handle(backend, plan, poll(look, decide, interval=poll_interval))

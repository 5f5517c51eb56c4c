"""Waiting for a job, written once: one pure step from what was observed to what to do next.

Every wait in the provider (the operator in its worker, the deferred trigger, the sensor, the KubeRay
RayJob operator and its trigger, and the ``airflow-ray`` CLI) is the same loop: look at the job, write
its new log lines, then keep waiting, succeed, fail, time out, or stop because the task was killed.
:func:`step` decides; :mod:`.transport` drives it with blocking calls or with ``await`` and owns
nothing but the I/O and the sleeping. So a rule (a timeout, a kill, a job that vanished) is fixed in
one place and reads the same however the job was waited on.

No Airflow or Ray imports.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from airflow_ray_provider.jobs.log_stream import new_log_lines
from airflow_ray_provider.launch.cleanup import Cleanup, Ending, actions_for

T = TypeVar("T")


class Action(str, enum.Enum):
    """What the wait does next."""

    WAIT = "wait"
    SUCCEED = "succeed"
    FAIL = "fail"
    TIME_OUT = "time_out"
    STOP = "stop"


@dataclass(frozen=True)
class WaitPlan:
    """What a wait needs to decide; every field is JSON-safe (it travels in a trigger's kwargs).

    :param start_time: epoch seconds the timeout counts from (the job's start).
    :param timeout: seconds after ``start_time`` before giving up; ``None`` waits for ever.
    :param log_offset: characters of the job's log already written.
    :param stream_logs: write new log lines at every look.
    :param missing_ok: keep waiting while the job does not exist (yet); otherwise that fails the wait.
    :param cleanup: what to do with a live job on a timeout or a kill (:mod:`.cleanup`).
    """

    start_time: float
    timeout: float | None = None
    log_offset: int = 0
    stream_logs: bool = True
    missing_ok: bool = False
    cleanup: Cleanup = Cleanup.ON_EXCEPTION

    def advanced(self, log_offset: int) -> WaitPlan:
        """The same plan, with the log written up to ``log_offset``."""
        return dataclasses.replace(self, log_offset=log_offset)


@dataclass(frozen=True)
class Observation(Generic[T]):
    """One look at the job.

    :param now: epoch seconds of the look.
    :param subject: what was seen (a ``JobState``, a ``RayJobLook``); ``None`` when the job was not found.
    :param terminal: the job has finished for good.
    :param succeeded: ... and it succeeded.
    :param log_text: its whole log so far; ``None`` when it was not read (not streaming, not readable yet).
    :param killed: the task was killed while it waited and the job was left running.
    """

    now: float
    subject: T | None = None
    terminal: bool = False
    succeeded: bool = False
    log_text: str | None = None
    killed: Ending | None = None

    @property
    def found(self) -> bool:
        """Whether the job exists."""
        return self.subject is not None


@dataclass(frozen=True)
class Step:
    """The decision for one look.

    :param action: what to do next.
    :param lines: new complete log lines to write now (no line endings).
    :param log_offset: the log offset after writing ``lines``.
    :param stop_job: stop the job before ending the wait (a timeout or a kill, as ``cleanup`` says).
    :param message: why the wait ended, for ``FAIL`` without a job, ``TIME_OUT`` and ``STOP``.
    """

    action: Action
    lines: tuple[str, ...] = field(default=())
    log_offset: int = 0
    stop_job: bool = False
    message: str = ""


def step(plan: WaitPlan, seen: Observation[Any]) -> Step:
    """Decide what to do after one look (pure: the same plan and look always give the same step)."""
    if seen.killed is not None:
        stop = actions_for(plan.cleanup, seen.killed).stop_job
        return Step(Action.STOP, (), plan.log_offset, stop, f"the task was killed ({seen.killed.value})")
    if not seen.found:
        if plan.missing_ok:
            return Step(Action.WAIT, (), plan.log_offset)
        return Step(Action.FAIL, (), plan.log_offset, message="job not found")
    lines: list[str] = []
    offset = plan.log_offset
    if plan.stream_logs and seen.log_text is not None:
        lines, offset = new_log_lines(seen.log_text, plan.log_offset, final=seen.terminal)
    if seen.terminal:
        return Step(Action.SUCCEED if seen.succeeded else Action.FAIL, tuple(lines), offset)
    if plan.timeout is not None and seen.now >= plan.start_time + plan.timeout:
        stop = actions_for(plan.cleanup, Ending.TIMED_OUT).stop_job
        message = f"ran past its timeout of {plan.timeout:g}s"
        return Step(Action.TIME_OUT, tuple(lines), offset, stop, message)
    return Step(Action.WAIT, tuple(lines), offset)

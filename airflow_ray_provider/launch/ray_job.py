"""A Ray job over the Job API: look at it, wait for it (sync or async), and end the way the wait ended.

The Job API client is anything with the methods of :class:`JobApi` / :class:`AsyncJobApi`: the Airflow
hook (``RayJobHook``) in operators and triggers, :class:`~airflow_ray_provider.launch.job_api.JobApiClient`
in the CLI. Both paths of an operator end in :func:`finish`: a sync wait is turned into the same typed
event a trigger fires (:func:`event_for`), so a failed, stopped, timed-out or vanished job reads the same
however it was waited on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from airflow_ray_provider.exceptions import RayProviderError
from airflow_ray_provider.jobs.events import JobDone, JobEvent, JobTimedOut, JobWaitFailed
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES
from airflow_ray_provider.jobs.outcome import raise_for_state, timeout_error
from airflow_ray_provider.launch.cleanup import Ending
from airflow_ray_provider.launch.transport import WaitOutcome, wait_async, wait_blocking
from airflow_ray_provider.launch.wait import Action, Observation, WaitPlan

if TYPE_CHECKING:
    from airflow_ray_provider.jobs.status import JobState
    from airflow_ray_provider.jobs.submission import JobSpec


class JobApi(Protocol):
    """The blocking Job API calls the lifecycle makes."""

    def get_job(self, submission_id: str) -> JobState | None: ...
    def get_job_logs(self, submission_id: str) -> str: ...
    def stop_job(self, submission_id: str) -> bool: ...
    def list_jobs(self) -> list[JobState]: ...
    def submit_job(self, spec: JobSpec, submission_id: str) -> str: ...


class AsyncJobApi(Protocol):
    """The async Job API calls a trigger makes."""

    async def aget_job(self, submission_id: str) -> JobState | None: ...
    async def aget_job_logs(self, submission_id: str) -> str: ...
    async def astop_job(self, submission_id: str) -> bool: ...


def _seen(state: JobState | None, text: str | None, killed: Ending | None = None) -> Observation[JobState]:
    if state is None:
        return Observation(time.time(), None, killed=killed)
    return Observation(time.time(), state, state.is_terminal, state.is_success, text, killed)


def observe(
    api: JobApi, submission_id: str, plan: WaitPlan, killed: Ending | None = None
) -> Observation[JobState]:
    """One blocking look: the job's state and, when streaming, its log."""
    state = api.get_job(submission_id)
    text = api.get_job_logs(submission_id) if state is not None and plan.stream_logs else None
    return _seen(state, text, killed)


async def aobserve(api: AsyncJobApi, submission_id: str, plan: WaitPlan) -> Observation[JobState]:
    """One async look."""
    state = await api.aget_job(submission_id)
    text = await api.aget_job_logs(submission_id) if state is not None and plan.stream_logs else None
    return _seen(state, text)


def wait_for_job(
    api: JobApi,
    submission_id: str,
    plan: WaitPlan,
    *,
    emit: Callable[[list[str]], None],
    poll_interval: float,
    killed: Callable[[], Ending | None] = lambda: None,
) -> WaitOutcome[JobState]:
    """Wait in this process (an operator's worker, the CLI).

    :param killed: asked at every look; an ending once the task was killed and the job left running.
    """
    return wait_blocking(
        plan,
        lambda p: observe(api, submission_id, p, killed()),
        emit=emit,
        stop_job=lambda: api.stop_job(submission_id),
        poll_interval=poll_interval,
    )


async def await_job(
    api: AsyncJobApi,
    submission_id: str,
    plan: WaitPlan,
    *,
    emit: Callable[[list[str]], None],
    poll_interval: float,
) -> WaitOutcome[JobState]:
    """Wait on an event loop (the triggerer)."""

    async def stop() -> bool:
        return await api.astop_job(submission_id)

    async def look(p: WaitPlan) -> Observation[JobState]:
        return await aobserve(api, submission_id, p)

    return await wait_async(plan, look, emit=emit, stop_job=stop, poll_interval=poll_interval)


def event_for(submission_id: str, outcome: WaitOutcome[JobState]) -> JobEvent:
    """The typed event that ends a wait (what the trigger fires; what the sync path finishes with)."""
    state, offset, decided = outcome.seen.subject, outcome.plan.log_offset, outcome.step
    if decided.action in (Action.SUCCEED, Action.FAIL) and state is not None:
        return JobDone(submission_id, state, offset)
    if decided.action is Action.TIME_OUT:
        return JobTimedOut(submission_id, outcome.stopped, offset, state)
    return JobWaitFailed(submission_id, decided.message or decided.action.value, offset)


def finish(
    event: JobEvent,
    *,
    logs: Callable[[str], str],
    timeout: float | None,
    where: str = "",
    tail_lines: int = DEFAULT_TAIL_LINES,
) -> JobState:
    """Return the state of a succeeded job; raise the provider's error for every other ending.

    :param logs: reads a job's whole log (best effort: it returns ``""`` when the log cannot be read).
    :param where: where the wait ran, for the message (``" in the triggerer"``).
    :raises RayJobFailedError, RayJobStoppedError, RayJobTimeoutError, RayProviderError: as it ended.
    """
    sid = event.submission_id
    if isinstance(event, JobWaitFailed):
        raise RayProviderError(f"waiting for Ray job {sid!r} failed{where}: {event.message}")
    if isinstance(event, JobTimedOut):
        raise timeout_error(sid, timeout or 0, logs(sid), stopped=event.stopped)
    if not event.state.is_success:
        raise_for_state(event.state, logs(sid), tail_lines=tail_lines)
    return event.state

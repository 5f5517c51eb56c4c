"""One Ray job's whole life, owned by one :class:`JobRun` from its first instant to its cleanup (by the
``cleanup`` word, on every way out: :func:`actions_for`); its wait is one pure :func:`step`, driven by
:func:`poll` or :func:`apoll`. No Airflow imports (docs/architecture.md, "The run lifecycle").
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from airflow_ray_provider.exceptions import (
    RayInvalidInputError,
    RayJobStoppedError,
    RayJobTimeoutError,
    RayProviderError,
)
from airflow_ray_provider.jobs.outcome import DEFAULT_TAIL_LINES, resume_offset, tail, timeout_error
from airflow_ray_provider.jobs.submission import Choice
from airflow_ray_provider.launch.usage import observer

if TYPE_CHECKING:
    from airflow_ray_provider.jobs.client import JobClient
    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.usage import UsageOptions

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
    def _missing_(cls, value: object) -> Cleanup:
        """``Cleanup(word)`` of another word: :class:`RayInvalidInputError` naming the field and the words."""
        words = ", ".join(repr(m.value) for m in cls)
        raise RayInvalidInputError(f"cleanup must be one of {words}, got {value!r}")


class Ending(str, enum.Enum):
    """How a run stopped waiting for its job (a wait's :class:`Step` ends with one)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    USER_KILL = "user_kill"
    WORKER_SIGTERM = "worker_sigterm"


class CleanupActions(NamedTuple):
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


def new_log_lines(text: str, offset: int, *, final: bool = False) -> tuple[list[str], int]:
    """The complete lines of ``text`` (the whole log: the Job API returns it on every read) past ``offset``
    (the characters already written, an int that travels through a trigger) and the new offset; ``final``:
    the job has finished, so a trailing line without a newline too."""
    # A log rotated or truncated under us (or a bogus offset): start over at its end, not dump it again.
    offset = min(max(offset, 0), len(text))
    pending = text[offset:]
    if final:
        return pending.splitlines(), len(text)
    cut = pending.rfind("\n") + 1  # 0: no complete line yet
    return pending[:cut].splitlines(), offset + cut


#: What a run says when it submits, re-attaches or finds its job finished.
VERBS = {Choice.SUBMIT: "Submitted", Choice.ATTACH: "Re-attached to running", Choice.DONE: "Found finished"}


class RunTarget(Protocol):
    """Where a run's job goes, and how it is submitted, seen, stopped and cleaned up there.

    :attr owned: cleanup may delete what :meth:`reach` made (a cluster the run created; a RayJob).
    :attr stop_takes_cluster: stopping the job deletes its cluster (a RayJob): the usage record is read
        before the stop.
    :attr backend: what reaches the cluster (a ``ClusterBackend``, ``None`` for a client given ready).
    """

    owned: bool
    stop_takes_cluster: bool = False
    dashboard_url: str | None
    client: JobClient | None
    backend: Any

    def reach(self, say: Callable[[str], None]) -> None:
        """Make the cluster ready (create, find or attach); blocking."""

    def submit(self, job: JobSpec, base_id: str) -> tuple[Choice, str, Any]:
        """Submit the job, or find the run's own: what was done, the submission id, what was seen."""

    def look(self, submission_id: str, *, with_log: bool) -> Observation:
        """One blocking look at the job."""

    async def alook(self, submission_id: str, *, with_log: bool) -> Observation:
        """One look that does not block the event loop."""

    def stop(self, submission_id: str) -> bool:
        """Stop the job; whether it was still running."""

    async def astop(self, submission_id: str) -> bool:
        """:meth:`stop` without blocking the event loop (by default in a thread)."""
        return await asyncio.to_thread(self.stop, submission_id)

    def delete(self, say: Callable[[str], None]) -> bool:
        """Delete what :meth:`reach` made (also half-made); whether it existed."""

    def keep(self, say: Callable[[str], None]) -> None:
        """Say what the run made and keeps (cleanup did not delete it)."""

    def release(self, say: Callable[[str], None]) -> None:
        """End what the run holds on a shared cluster (a pool's lease); by default nothing."""
        return None

    def prices(self) -> dict[str, Any] | None:
        """The price table that holds for every job on the reached cluster (a pool's), over the run's own;
        by default none."""
        return None

    def logs(self, submission_id: str) -> str:
        """The job's whole log, ``""`` when it cannot be read."""

    def usage_facts(self) -> tuple[str, str, bool, str, str | None]:
        """What the usage record says of the cluster: the mode, the cluster's name, whether the run owns it,
        why the record has no teardown time, and the connection whose prices hold."""

    def dashboard(self) -> JobClient | None:
        """The client of the job's cluster while it answers (the usage record reads its dashboard)."""

    def link(self, submission_id: str) -> str | None:
        """The job's page in the dashboard people open, once known."""

    def result(self, subject: Any, logs: Callable[[], str], tail_lines: int) -> dict[str, Any]:
        """The XCom of a finished job; the provider's error, with ``logs()``'s tail, if it did not succeed."""

    def restore(self, data: dict[str, Any]) -> Any:
        """What a handed-over run had seen (``dataclasses.asdict(subject)``), taken in as if seen here."""

    def ref(self) -> dict[str, Any]:
        """How the face that made this target makes it again (JSON, never a secret)."""

    def close(self) -> None:
        """Release blocking clients: the backend's."""
        if self.backend is not None:
            self.backend.close()

    async def aclose(self) -> None:
        """Release async clients: the Job API client's reader."""
        if self.client is not None:
            await self.client.aclose()


#: What a run's state carries as it is: the constructor's arguments first, then what the run learnt.
STATE = ("base_id", "submission_id", "timeout", "poll_interval", "stream_logs", "missing_ok", "tail_lines",
         "stopped", "linked", "times", "record")  # fmt: skip


def print_lines(lines: list[str]) -> None:
    """Write job-log lines to stdout (a terminal's default)."""
    for line in lines:
        print(line, flush=True)


@dataclasses.dataclass(eq=False)
class JobRun:
    """One run of one Ray job (see the module's docstring).

    :param job: the job to submit; ``None`` to watch the job ``submission_id`` submitted elsewhere.
    :param base_id: the run's base submission id (a rerun with it re-attaches).
    :param timeout: seconds from the job's start before it is given up on.
    :param missing_ok: keep waiting while the job does not exist yet (a sensor).
    :param tail_lines: lines of the job's log the error of a failed job carries.
    :param usage: what the usage record needs (``None``: no record).
    :param on_lines: writes job-log lines; ``say``: status lines.
    :param on_link: called once with the job's dashboard page when it is first known (an extra link).
    :param timeout_errors: exception types that mean the task ran out of time (Airflow's task timeout).
    """

    target: RunTarget
    _: dataclasses.KW_ONLY
    job: JobSpec | None = None
    base_id: str = ""
    submission_id: str | None = None
    cleanup: Cleanup = Cleanup.ON_EXCEPTION
    timeout: float | None = None
    poll_interval: float = 5.0
    stream_logs: bool = True
    missing_ok: bool = False
    tail_lines: int = DEFAULT_TAIL_LINES
    usage: UsageOptions | None = None
    on_lines: Callable[[list[str]], None] = print_lines
    say: Callable[[str], None] = log.info
    on_link: Callable[[str], None] | None = None
    timeout_errors: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        self.linked = False
        self.choice: Choice | None = None
        self.subject: Any = None
        self.plan = WaitPlan(time.time(), self.timeout, 0, self.stream_logs, self.missing_ok, self.cleanup)
        self.last: Step | None = None
        #: The job's log as last read (what a failure shows when the log cannot be read again).
        self.log_text = ""
        self.killed: Ending | None = None
        self.ending: Ending | None = None
        self.stopped = False
        self.deleted = False
        self.handed_over = False
        self.record: dict[str, Any] | None = None
        #: Epoch seconds: ``reach`` began, the cluster answered, the job was handed over.
        self.times: dict[str, float] = {}

    # ----------------------------------------------------------------- the steps
    def __enter__(self) -> JobRun:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.handed_over:
            self.target.close()
            return
        try:
            self.end(self._ending_for(exc))
        except Exception as cleanup_error:
            if exc is None:
                raise
            self.say(f"Cleanup after the error failed too: {cleanup_error}")

    def reach(self) -> None:
        """Make the target ready (a cluster created here is the run's from this instant on)."""
        self.times["reach"] = time.time()
        self.target.reach(self.say)
        self.times["ready"] = time.time()
        if self.usage is not None and (prices := self.target.prices()) is not None:
            self.usage = dataclasses.replace(self.usage, prices=prices)

    def submit(self) -> None:
        """Submit the job, or re-attach to the run's job, or find it finished (or watch the given one)."""
        if self.job is not None:
            self.choice, self.submission_id, self.subject = self.target.submit(self.job, self.base_id)
            where = f"; dashboard {self.target.dashboard_url}" if self.target.dashboard_url else ""
            self.say(f"{VERBS[self.choice]} Ray job {self.submission_id}{where}")
        assert self.submission_id is not None
        self._announce()
        if self.subject is None:
            self.subject = self.target.look(self.submission_id, with_log=False).subject
        offset = 0
        if self.choice is Choice.ATTACH and self.stream_logs:
            offset = resume_offset(self.target.logs(self.submission_id))
            if offset:
                self.say(f"Re-attached: the job log's first {offset} characters are in the earlier try's log")
        start = getattr(self.subject, "start_time", None)  # Ray's milliseconds; the job's, not ours
        start = start / 1000.0 if isinstance(start, (int, float)) and start else time.time()
        self.plan = dataclasses.replace(self.plan, start_time=start, log_offset=offset)

    def _announce(self) -> None:
        """Hand the job's dashboard page to ``on_link`` the first time it is known."""
        if self.on_link is None or self.linked or not self.submission_id:
            return
        if url := self.target.link(self.submission_id):
            self.linked = True
            self.on_link(url)

    @property
    def finished(self) -> bool:
        """Whether the wait has ended (or the job was found finished)."""
        return self.last is not None or self.choice is Choice.DONE

    @property
    def live(self) -> bool:
        """Whether the job may still run: submitted, and neither stopped nor seen to end."""
        return bool(self.submission_id) and not self.stopped and not self.finished

    def _decide(self, seen: Observation) -> Step | None:
        decided = step(self.plan, seen)
        self.on_lines(list(decided.lines))
        self.plan = dataclasses.replace(self.plan, log_offset=decided.log_offset)
        self.subject = seen.subject or self.subject
        if seen.log_text is not None:
            self.log_text = seen.log_text
        self._announce()
        return None if decided.ending is None else decided

    def _look(self) -> Observation:
        seen = self.target.look(self.submission_id or "", with_log=self.stream_logs)
        if self.usage is not None and observer.looked(self, seen):
            observer.record(self)
        return dataclasses.replace(seen, killed=self.killed)

    async def _alook(self) -> Observation:
        seen = await self.target.alook(self.submission_id or "", with_log=self.stream_logs)
        if self.usage is not None and observer.looked(self, seen):
            await asyncio.to_thread(observer.record, self)
        return seen

    def wait(self) -> None:
        """Wait in this process until the job ends, times out or the task is killed."""
        if self.choice is Choice.DONE:
            return
        self.last = poll(self._look, self._decide, interval=self.poll_interval)
        if self.last.stop_job and not self.stopped:
            self.stopped = self.target.stop(self.submission_id or "")

    async def await_end(self) -> None:
        """:meth:`wait` on an event loop (a trigger)."""
        self.last = await apoll(self._alook, self._decide, interval=self.poll_interval)
        if self.last.stop_job and not self.stopped:
            self.stopped = await self.target.astop(self.submission_id or "")

    def look_once(self) -> Step:
        """One look and its step (a sensor's poke), writing no log."""
        seen = self.target.look(self.submission_id or "", with_log=False)
        self.subject = seen.subject or self.subject
        return step(WaitPlan(seen.now, stream_logs=False, missing_ok=self.missing_ok), seen)

    def result(self) -> dict[str, Any]:
        """The XCom of a succeeded job; the provider's error for every other ending."""
        last, sid = self.last or Step(Ending.SUCCEEDED), self.submission_id or "?"  # none: found finished
        if last.ending is Ending.TIMED_OUT:
            raise timeout_error(sid, self.timeout or 0, self.logs(), stopped=self.stopped)
        if last.ending in (Ending.USER_KILL, Ending.WORKER_SIGTERM):
            why = last.message
            if self.stopped:
                log_tail = tail(self.logs(), self.tail_lines)
                raise RayJobStoppedError(f"Ray job {sid!r} was stopped: {why}", submission_id=sid,
                                         status="STOPPED", log_tail=log_tail)  # fmt: skip
            raise RayProviderError(f"stopped waiting for Ray job {sid!r} ({why}); it was left running")
        if self.subject is None:
            raise RayProviderError(f"waiting for Ray job {sid!r} failed: {last.message}")
        result = self.target.result(self.subject, self.logs, self.tail_lines)
        self.say(f"Ray job {sid} SUCCEEDED")
        return result

    def flush(self) -> None:
        """Write the lines the log holds past the offset (what a trigger had not written yet), and hand
        over the job's page if a trigger learnt it."""
        self._announce()
        if self.stream_logs and self.submission_id:
            text = self.target.logs(self.submission_id)
            self.on_lines(new_log_lines(text, self.plan.log_offset, final=True)[0] if text else [])

    def logs(self) -> str:
        """The job's whole log, best effort: read again, else as last read."""
        text = self.target.logs(self.submission_id) if self.submission_id else ""
        return text or self.log_text

    # ----------------------------------------------------------------- the end
    def _ending_for(self, exc: BaseException | None) -> Ending:
        if self.killed is not None:
            return self.killed
        if isinstance(exc, KeyboardInterrupt):
            return Ending.USER_KILL
        timed_out = self.last is not None and self.last.ending is Ending.TIMED_OUT
        if timed_out or isinstance(exc, (RayJobTimeoutError, *self.timeout_errors)):
            return Ending.TIMED_OUT
        return Ending.FAILED if exc is not None else Ending.SUCCEEDED

    def end(self, ending: Ending, *, close: bool = True) -> None:
        """Clean up as the table says for ``ending``: stop the job, make the usage record, delete what the
        run created, release a pool's lease (kept while the job is left running: it expires, or the next
        try renews it). Each action runs once, however often this is called. ``close``: release the
        target's clients too (not on a kill: the wait still takes its last look)."""
        self.ending, actions, live = ending, actions_for(self.cleanup, ending), self.live
        try:
            if actions.stop_job and live:
                if self.target.stop_takes_cluster:
                    observer.record(self, refresh=True)
                self.stopped = self.target.stop(self.submission_id or "")
                self.say(f"Stopped Ray job {self.submission_id} (was running: {self.stopped})")
            elif live and ending is Ending.WORKER_SIGTERM:
                self.say(f"Leaving Ray job {self.submission_id} running: the next try re-attaches to it "
                         f"(cleanup={self.cleanup.value})")  # fmt: skip
            observer.record(self, refresh=True)
            if self.target.owned and actions.delete_cluster and not self.deleted:
                self.deleted = True
                if self.target.delete(self.say):
                    observer.deleted(self)
            elif self.target.owned and not self.deleted and self.times.get("reach"):
                self.target.keep(lambda message: self.say(f"{message} (cleanup={self.cleanup.value})"))
        finally:
            try:
                if not self.live:
                    self.target.release(self.say)  # a job left running keeps its lease until it expires
            finally:
                if close:
                    self.target.close()

    def kill(self, ending: Ending) -> None:
        """The task was killed (``on_kill``): the wait stops at its next look; clean up now."""
        self.killed = ending
        self.end(ending, close=False)

    async def akill(self, ending: Ending) -> None:
        """:meth:`kill` from a trigger: stop the job without blocking the loop, the rest in a thread."""
        self.killed = self.ending = ending
        if actions_for(self.cleanup, ending).stop_job and self.live:
            if self.target.stop_takes_cluster:
                await asyncio.to_thread(observer.record, self, refresh=True)
            self.stopped = await self.target.astop(self.submission_id or "")
            self.say(f"Stopped Ray job {self.submission_id} (was running: {self.stopped})")
        await self.target.aclose()
        await asyncio.to_thread(self.end, ending)

    # ----------------------------------------------------------------- handing over
    def hand_over(self) -> dict[str, Any]:
        """The run's state for a trigger; this process will not clean it up."""
        self.handed_over = True
        self.times["handed_over"] = time.time()
        return self.state()

    def state(self) -> dict[str, Any]:
        """Everything a trigger or ``execute_complete`` needs to go on with this run (JSON, no secret)."""
        last = self.last
        return {
            **{name: getattr(self, name) for name in STATE}, "target": self.target.ref(),
            "choice": self.choice and self.choice.value, "cleanup": self.cleanup.value,
            "start_time": self.plan.start_time, "log_offset": self.plan.log_offset,
            "subject": self.subject and dataclasses.asdict(self.subject),
            "step": last and last.ending and {"ending": last.ending.value, "message": last.message},
            "usage": self.usage and dataclasses.asdict(self.usage), "log_tail": tail(self.log_text),
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: dict[str, Any], target: RunTarget, **kwargs: Any) -> JobRun:
        """The run of :meth:`state`, on ``target`` (made again from ``state["target"]`` by the face);
        ``kwargs``: ``on_lines``, ``say``, ``timeout_errors``."""
        from airflow_ray_provider.launch.usage import UsageOptions

        usage = UsageOptions(**state["usage"]) if state["usage"] else None
        arguments = {name: state[name] for name in STATE[:7]}
        run = cls(target, cleanup=Cleanup(state["cleanup"]), usage=usage, **arguments, **kwargs)
        for name in STATE[7:]:
            setattr(run, name, state[name])
        run.choice = state["choice"] and Choice(state["choice"])
        run.plan = dataclasses.replace(run.plan, **{k: state[k] for k in ("start_time", "log_offset")})
        run.subject = state["subject"] and target.restore(state["subject"])
        if state["step"]:
            run.last = Step(Ending(state["step"]["ending"]), message=state["step"]["message"])
        run.log_text = state["log_tail"]
        return run

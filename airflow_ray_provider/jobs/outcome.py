"""One truth for Ray job state, shared by the operator, the sensor and the trigger (:class:`JobStatus`
mirrors Ray's ``JobStatus`` member for member, a test checks it: importing Ray's loads all of ``ray``,
which the triggerer must not); the job's driver log, streamed without repeating lines; and how a finished
job ends the task: the XCom result, or a provider error with the log's tail.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import quote

from airflow_ray_provider.exceptions import (
    RayJobFailedError,
    RayJobStoppedError,
    RayJobTimeoutError,
    RayProviderError,
)


class JobStatus(str, Enum):
    """The status of a Ray job, value-identical to ``ray.job_submission.JobStatus``: ``PENDING`` (waiting
    for the driver to start: resources, runtime_env setup), ``RUNNING``, ``STOPPED`` (by ``ray job stop``,
    ``on_kill``, a timeout), ``SUCCEEDED`` (exit code 0), ``FAILED`` (non-zero, or it could not start)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def is_terminal(self) -> bool:
        """Whether the job will never change status again (same rule as Ray's ``is_terminal``)."""
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)

    def is_success(self) -> bool:
        """Whether the job finished successfully."""
        return self is JobStatus.SUCCEEDED


@dataclass(frozen=True)
class JobState:
    """A snapshot of one Ray job, parsed from the Job API's ``GET /api/jobs/{id}`` response (times in
    milliseconds since the epoch, Ray's clock; ``driver_exit_code`` once the entrypoint exited)."""

    submission_id: str
    status: JobStatus
    message: str | None = None
    driver_exit_code: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    entrypoint: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def is_terminal(self) -> bool:
        """Whether the job has finished."""
        return self.status.is_terminal()

    @property
    def is_success(self) -> bool:
        """Whether the job succeeded."""
        return self.status.is_success()

    @classmethod
    def from_api(cls, details: Any) -> JobState:
        """Parse one job of the Job API (Ray's ``JobDetails`` or its JSON) or of :meth:`to_dict`
        (``ValueError`` without a submission id or with an unknown status)."""
        data = details if isinstance(details, dict) else vars(details)
        if not data.get("submission_id"):
            raise ValueError(f"Job API response has no submission_id: keys {sorted(data)}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.update(submission_id=str(data["submission_id"]), metadata=dict(data.get("metadata") or {}))
        known["status"] = JobStatus(getattr(data.get("status"), "value", data.get("status")))
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (for trigger events and XCom)."""
        return {**asdict(self), "status": self.status.value}


DEFAULT_TAIL_LINES = 50
#: Longest log line an error carries (a ``--config-json`` entrypoint echoed in the log runs to pages).
MAX_LINE_CHARS = 500
#: Lines of context a re-attached try shows again (the earlier try's task log has everything before).
REATTACH_CONTEXT_LINES = 20

#: Prefix of every streamed job-log line in the task log.
LOG_PREFIX = "[ray job] "


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


def tail(text: str, lines: int = DEFAULT_TAIL_LINES, limit: int = MAX_LINE_CHARS) -> str:
    """The last ``lines`` lines of a log, each cut to ``limit`` characters (saying how many were cut)."""
    return "\n".join(
        f"{line[:limit]}... ({len(line) - limit} more characters)" if len(line) > limit else line
        for line in (text.splitlines()[-lines:] if lines > 0 else [])
    )


def resume_offset(text: str, context_lines: int = REATTACH_CONTEXT_LINES) -> int:
    """Where a re-attached try starts streaming: the last ``context_lines`` complete lines of ``text`` (the
    earlier try's task log has the rest)."""
    lines = text[: text.rfind("\n") + 1].split("\n")[:-1]
    return sum(len(line) + 1 for line in lines[:-context_lines]) if 0 < context_lines < len(lines) else 0


def dashboard_job_url(dashboard_url: str, submission_id: str) -> str:
    """Link to the job's page in the Ray dashboard UI."""
    return f"{dashboard_url.rstrip('/')}/#/jobs/{quote(submission_id, safe='')}"


def job_result(state: JobState, dashboard_url: str) -> dict[str, str]:
    """The operator's XCom: ``submission_id``, ``status``, ``dashboard_url``, ``job_url``."""
    return {
        "submission_id": state.submission_id,
        "status": state.status.value,
        "dashboard_url": dashboard_url,
        "job_url": dashboard_job_url(dashboard_url, state.submission_id),
    }


def raise_for_state(state: JobState, log_text: str, *, tail_lines: int = DEFAULT_TAIL_LINES) -> None:
    """Return quietly for a succeeded job; else raise :class:`RayJobFailedError` (with the driver's exit
    code), :class:`RayJobStoppedError` or, for a job not finished, :class:`RayProviderError`, carrying the
    last ``tail_lines`` lines of ``log_text``."""
    sid = state.submission_id
    if state.is_success:
        return
    if not state.is_terminal:
        raise RayProviderError(f"Ray job {sid!r} has not finished (status {state.status.value})")
    log_tail = tail(log_text, tail_lines)
    shown = f"\nLast {tail_lines} lines of its log:\n{log_tail}" if log_tail else "\n(its log is empty)"
    # Ray's message without the copy of the log it appends (the error carries the log once)
    message = (state.message or "no message").split(", last available logs", 1)[0] + shown
    if state.status is JobStatus.STOPPED:
        raise RayJobStoppedError(f"Ray job {sid!r} was STOPPED (by a user, a kill or a timeout): {message}",
                                 submission_id=sid, status=state.status.value, log_tail=log_tail)  # fmt: skip
    code = f" with driver exit code {state.driver_exit_code}" if state.driver_exit_code is not None else ""
    raise RayJobFailedError(f"Ray job {sid!r} FAILED{code}: {message}", submission_id=sid, log_tail=log_tail,
                            exit_code=state.driver_exit_code)  # fmt: skip


def timeout_error(submission_id: str, timeout: float, log_text: str, *, stopped: bool) -> RayJobTimeoutError:
    """The error for a job that ran past ``job_timeout``."""
    log_tail = tail(log_text)
    action = "it was stopped" if stopped else "it was left running"
    text = f"Ray job {submission_id!r} ran past job_timeout={timeout:g}s; {action}."
    shown = f"\nLast lines of its log:\n{log_tail}" if log_tail else ""
    return RayJobTimeoutError(text + shown, submission_id=submission_id, status="TIMEOUT", log_tail=log_tail)

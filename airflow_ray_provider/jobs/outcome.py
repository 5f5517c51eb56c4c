"""How a finished Ray job ends the task: the XCom result, or a provider error with the log's tail; and the
log's tail and re-attach offset. No Airflow imports.
"""

from __future__ import annotations

from urllib.parse import quote

from airflow_ray_provider.exceptions import (
    RayJobFailedError,
    RayJobStoppedError,
    RayJobTimeoutError,
    RayProviderError,
)
from airflow_ray_provider.jobs.client import JobState, JobStatus

DEFAULT_TAIL_LINES = 50
#: Longest log line an error carries (a ``--config-json`` entrypoint echoed in the log runs to pages).
MAX_LINE_CHARS = 500
#: Lines of context a re-attached try shows again (the earlier try's task log has everything before).
REATTACH_CONTEXT_LINES = 20

#: Prefix of every streamed job-log line in the task log.
LOG_PREFIX = "[ray job] "


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

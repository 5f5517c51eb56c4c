"""Trigger events, typed: one class per kind, checked where an event is made and where it is read.

A trigger builds one of these and fires ``event.to_payload()``; ``execute_complete`` turns the payload
back into its class with :func:`parse_job_event` / :func:`parse_rayjob_event` (which reject anything
malformed) and branches on the class, never on strings in the payload. Payloads stay plain JSON with the
keys earlier releases used, so an event fired by a trigger of the previous release still reads.

==================  ===========================================================================
event               payload
==================  ===========================================================================
:class:`JobDone`    ``{"status": "done", "submission_id", "job": JobState dict, "log_offset", "busy"}``
:class:`JobTimedOut` ``{"status": "timeout", "submission_id", "job", "log_offset", "stopped", "busy"}``
:class:`JobWaitFailed` ``{"status": "error", "submission_id", "log_offset", "message"}``
:class:`RayJobDone` ``{"status": "done", "name", "rayjob": RayJobStatus dict, "dashboard_url", "usage", ...}``
:class:`RayJobWaitFailed` ``{"status": "error", "name", "message"}``
==================  ===========================================================================

Cluster readiness events have their own typed shape in :mod:`airflow_ray_provider.clusters.readiness`.
No Airflow or Ray imports (the exceptions module aside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from airflow_ray_provider.exceptions import RayProviderError
from airflow_ray_provider.jobs.status import JobState

DONE: Final = "done"
TIMEOUT: Final = "timeout"
ERROR: Final = "error"
_STOPPED_WORD = "stopped"  # what a timeout event of earlier releases said in its message


def _need(condition: bool, what: str, payload: Any) -> None:
    if not condition:
        raise RayProviderError(f"{what}: {payload!r}")


@dataclass(frozen=True)
class JobDone:
    """The Ray job finished (any terminal status); the task decides success or failure from ``state``."""

    submission_id: str
    state: JobState
    log_offset: int = 0
    #: The trigger's busy-CPU samples (``BusyLedger.to_dict()``; ``None``: not sampled there).
    busy: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _need(bool(self.submission_id), "trigger event without submission_id", self)
        _need(self.state.is_terminal, "a 'done' trigger event for a job that has not finished", self)

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "status": DONE,
            "submission_id": self.submission_id,
            "job": self.state.to_dict(),
            "log_offset": self.log_offset,
            "message": "",
            "busy": self.busy,
        }


@dataclass(frozen=True)
class JobTimedOut:
    """The Ray job ran past its timeout; ``stopped`` says whether it was stopped (cleanup)."""

    submission_id: str
    stopped: bool
    log_offset: int = 0
    state: JobState | None = None
    #: The trigger's busy-CPU samples (as :attr:`JobDone.busy`).
    busy: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _need(bool(self.submission_id), "trigger event without submission_id", self)

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload (``message`` kept for readers of earlier releases)."""
        return {
            "status": TIMEOUT,
            "submission_id": self.submission_id,
            "job": self.state.to_dict() if self.state is not None else None,
            "log_offset": self.log_offset,
            "stopped": self.stopped,
            "message": _STOPPED_WORD if self.stopped else "left running",
            "busy": self.busy,
        }


@dataclass(frozen=True)
class JobWaitFailed:
    """Waiting failed (the job vanished, the dashboard stopped answering): ``message`` says how."""

    submission_id: str
    message: str
    log_offset: int = 0

    def __post_init__(self) -> None:
        _need(bool(self.submission_id), "trigger event without submission_id", self)

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "status": ERROR,
            "submission_id": self.submission_id,
            "job": None,
            "log_offset": self.log_offset,
            "message": self.message,
        }


JobEvent = JobDone | JobTimedOut | JobWaitFailed


def parse_job_event(payload: Any) -> JobEvent:
    """The typed event of a :class:`~airflow_ray_provider.triggers.ray_job.RayJobTrigger` payload.

    :raises RayProviderError: for anything that is not a well-formed event.
    """
    _need(
        isinstance(payload, dict) and payload.get("status") in (DONE, TIMEOUT, ERROR),
        "unexpected trigger event",
        payload,
    )
    sid = payload.get("submission_id")
    _need(isinstance(sid, str) and bool(sid), "trigger event without submission_id", payload)
    offset = int(payload.get("log_offset") or 0)
    job = payload.get("job")
    busy = payload.get("busy") if isinstance(payload.get("busy"), dict) else None
    if payload["status"] == DONE:
        _need(isinstance(job, dict), "trigger event 'done' without the job's state", payload)
        return JobDone(sid, JobState.from_dict(job), offset, busy)
    if payload["status"] == TIMEOUT:
        stopped = payload.get("stopped")
        if not isinstance(stopped, bool):  # fired by a trigger of an earlier release
            stopped = payload.get("message") == _STOPPED_WORD
        state = JobState.from_dict(job) if isinstance(job, dict) else None
        return JobTimedOut(sid, stopped, offset, state, busy)
    return JobWaitFailed(sid, str(payload.get("message") or "no message"), offset)


@dataclass(frozen=True)
class RayJobDone:
    """KubeRay is done with the RayJob (``Complete`` or ``Failed``).

    :param name: the RayJob's name.
    :param rayjob: its status (``RayJobStatus.to_dict()``).
    :param dashboard_url: its cluster's dashboard as last seen (the cluster may be gone).
    :param log_offset: characters of the job's log already written.
    :param log_tail: the last lines of the log, for a failure.
    :param usage: the job's usage record, made while its cluster still answered (``None``: none).
    """

    name: str
    rayjob: dict[str, Any]
    dashboard_url: str | None = None
    log_offset: int = 0
    log_tail: str = ""
    usage: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _need(bool(self.name), "RayJob trigger event without the RayJob's name", self)
        _need(isinstance(self.rayjob, dict), "RayJob trigger event without the RayJob's status", self)

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "status": DONE,
            "name": self.name,
            "rayjob": self.rayjob,
            "dashboard_url": self.dashboard_url,
            "log_offset": self.log_offset,
            "log_tail": self.log_tail,
            "usage": self.usage,
            "message": "",
        }


@dataclass(frozen=True)
class RayJobWaitFailed:
    """Waiting for the RayJob failed; ``message`` says how."""

    name: str
    message: str
    log_offset: int = 0

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "status": ERROR,
            "name": self.name,
            "rayjob": None,
            "dashboard_url": None,
            "log_offset": self.log_offset,
            "log_tail": "",
            "message": self.message,
        }


RayJobEvent = RayJobDone | RayJobWaitFailed


def parse_rayjob_event(payload: Any) -> RayJobEvent:
    """The typed event of a :class:`~airflow_ray_provider.triggers.kuberay_job.KubeRayJobTrigger` payload.

    :raises RayProviderError: for anything that is not a well-formed event.
    """
    _need(
        isinstance(payload, dict) and payload.get("status") in (DONE, ERROR),
        "unexpected RayJob trigger event",
        payload,
    )
    name = str(payload.get("name") or "")
    offset = int(payload.get("log_offset") or 0)
    if payload["status"] == ERROR or not isinstance(payload.get("rayjob"), dict):
        return RayJobWaitFailed(name, str(payload.get("message") or "no message"), offset)
    url = payload.get("dashboard_url")
    return RayJobDone(
        name,
        payload["rayjob"],
        url if isinstance(url, str) else None,
        offset,
        str(payload.get("log_tail") or ""),
        payload["usage"] if isinstance(payload.get("usage"), dict) else None,
    )

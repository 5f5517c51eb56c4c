"""Every error of the provider proper, in one tree under :class:`RayProviderError` (a template's own errors
subclass it), with no Airflow import: each carries the fields a user acts on (dataclass fields, by keyword)
and says what to do next."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False, repr=False)
class RayProviderError(Exception):
    """Base class of every error this provider raises; ``str()`` is its message."""

    message: str = ""

    def __post_init__(self) -> None:
        super().__init__(self.message)


class RayInvalidInputError(RayProviderError, ValueError):
    """Bad operator input, found before any cluster or job was created."""


@dataclass(eq=False, repr=False, kw_only=True)
class RayDashboardUnreachableError(RayProviderError):
    """The Ray dashboard (Job API) at ``url`` of ``conn_id`` (or cluster handle) did not answer (retried)."""

    url: str
    conn_id: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class RayJobApiError(RayProviderError):
    """The Ray Job API at ``url`` (no credentials) answered an error retrying will not fix (400, 401, 404)."""

    http_status: int
    url: str


class RayJobAlreadyExistsError(RayJobApiError):
    """A job with this submission id already exists (Ray answers 500 "already exists"); re-attach to it."""


@dataclass(eq=False, repr=False, kw_only=True)
class RayJobError(RayProviderError):
    """A Ray job ended badly: its final ``JobStatus`` value and the last lines of its driver log."""

    submission_id: str
    status: str
    log_tail: str = ""


@dataclass(eq=False, repr=False, kw_only=True)
class RayJobFailedError(RayJobError):
    """The job's entrypoint failed (``FAILED``); carries the driver's exit code when Ray reports it."""

    status: str = "FAILED"
    exit_code: int | None = None


class RayJobStoppedError(RayJobError):
    """The job was stopped (``STOPPED``) by a user, a kill or another system."""


class RayJobTimeoutError(RayJobError):
    """The job ran past ``job_timeout``; it was stopped."""


@dataclass(eq=False, repr=False, kw_only=True)
class KubeRayJobError(RayJobError):
    """A KubeRay RayJob ended ``Failed`` (``reason``: ``AppFailed``, ``DeadlineExceeded``, ...) or
    ``Complete`` with a Ray job that did not succeed (``deployment_status``: its final one)."""

    name: str
    namespace: str
    deployment_status: str
    reason: str = ""


@dataclass(eq=False, repr=False, kw_only=True)
class RayTaskError(RayJobError):
    """A ``@task.ray`` job did not return its function's value: ``stage`` (``setup``, ``function``,
    ``result``; ``""`` without a message from the job) and the remote exception's type, message, traceback."""

    status: str = "FAILED"
    stage: str = ""
    remote_type: str = ""
    remote_message: str = ""
    remote_traceback: str = ""


class RayTaskFunctionError(RayTaskError):
    """The ``@task.ray`` function raised in the Ray job; carries the remote type, message and traceback."""


@dataclass(eq=False, repr=False, kw_only=True)
class RayClusterError(RayProviderError):
    """A Ray cluster could not be created, reached or deleted (``namespace`` is ``None`` for a local one)."""

    name: str
    namespace: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class RayClusterNotReadyError(RayClusterError):
    """The cluster did not become ready in time; carries its last conditions."""

    conditions: list[dict[str, Any]] = field(default_factory=list)

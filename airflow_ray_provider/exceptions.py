"""Every error this provider raises, in one tree under :class:`RayProviderError`, with no Airflow import.

Each carries the fields a user needs to act on it (dataclass fields, passed by keyword), and its message
says what to do next; the lifecycle, the CLI and the operators raise the same plain errors
(docs/architecture.md). ``RayInvalidInputError`` (also a ``ValueError``) is bad input, found before
anything was created.
"""

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


class InvalidClusterHandleError(RayInvalidInputError):
    """A value passed as a cluster handle is not one (not the XCom of ``CreateRayClusterOperator``)."""


class PolicyError(RayInvalidInputError):
    """The champion-vs-challenger decision policy is malformed; the message says which field to fix."""


@dataclass(eq=False, repr=False, kw_only=True)
class RayDashboardUnreachableError(RayProviderError):
    """The Ray dashboard (Job API) at ``url`` did not answer after retries; ``conn_id`` is the connection
    (or cluster handle) the URL came from."""

    url: str
    conn_id: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class RayJobApiError(RayProviderError):
    """The Ray Job API answered ``url`` (never carrying credentials) with an error that retrying will not fix
    (e.g. 400, 401, 404)."""

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
    """A KubeRay RayJob ended without success: ``Failed`` (its ``reason`` says why: ``AppFailed``,
    ``DeadlineExceeded``, ``SubmissionFailed``, ...) or ``Complete`` with a Ray job that did not succeed.
    ``deployment_status`` is its final ``status.jobDeploymentStatus``."""

    name: str
    namespace: str
    deployment_status: str
    reason: str = ""


@dataclass(eq=False, repr=False, kw_only=True)
class RayTaskError(RayJobError):
    """A ``@task.ray`` job did not return its function's value (the driver said why, or the job died).

    :param stage: where it failed in the job: ``setup`` (interpreter mismatch, unpickling), ``function``
        or ``result`` (the value could not travel back); ``""`` when the job left no message.
    :param remote_type: the exception's type in the job (``ValueError``, ``mypkg.MyError``), with its
        ``remote_message`` and ``remote_traceback`` as the job printed them.
    """

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


@dataclass(eq=False, repr=False, kw_only=True)
class MetricsArtifactError(RayProviderError):
    """The artifact at ``uri`` is unusable; ``problem``: ``missing``, ``partial``, ``corrupt``, ``schema``."""

    uri: str
    problem: str

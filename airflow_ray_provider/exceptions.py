"""Every error this provider raises, in one tree under :class:`RayProviderError`, with no Airflow import.

Each carries the fields a user needs to act on it (declared as dataclass fields, passed by keyword), and
its message says what to do next. The tree imports no Airflow, so the run lifecycle, the ``airflow-ray``
CLI and the operators raise the same plain errors. The KubeRay client layer
(:mod:`airflow_ray_provider.kuberay.errors`) and the code inside Ray jobs
(:mod:`airflow_ray_provider.workloads.common.errors`) keep their own errors; the layers above wrap them in
these, raised ``from`` the original.

Hierarchy::

    RayProviderError
    ├── RayInvalidInputError (also ValueError): bad input, found before anything was created
    │   ├── InvalidClusterHandleError
    │   └── PolicyError
    ├── RayDashboardUnreachableError
    ├── RayJobApiError
    │   └── RayJobAlreadyExistsError
    ├── RayJobError
    │   ├── RayJobFailedError
    │   ├── RayJobStoppedError
    │   ├── RayJobTimeoutError
    │   ├── KubeRayJobError
    │   └── RayTaskError (a ``@task.ray`` job could not run or return its function)
    │       └── RayTaskFunctionError (the function raised)
    ├── RayClusterError
    │   └── RayClusterNotReadyError
    └── MetricsArtifactError
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
    """The Ray dashboard (Job API) did not answer after retries.

    :param url: the dashboard URL that was tried.
    :param conn_id: the connection (or cluster handle) the URL came from.
    """

    url: str
    conn_id: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class RayJobApiError(RayProviderError):
    """The Ray Job API answered with an error that retrying will not fix (e.g. 400, 401, 404).

    :param http_status: the HTTP status code the Job API answered with.
    :param url: the URL that was called (never carries credentials).
    """

    http_status: int
    url: str


class RayJobAlreadyExistsError(RayJobApiError):
    """A job with this submission id already exists (Ray answers 500 "already exists"); re-attach to it."""


@dataclass(eq=False, repr=False, kw_only=True)
class RayJobError(RayProviderError):
    """A Ray job ended badly.

    :param submission_id: the job's submission id.
    :param status: its final Ray ``JobStatus`` value.
    :param log_tail: the last lines of its driver log.
    """

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
    """A KubeRay RayJob ended without success: ``Failed`` (its reason says why: ``AppFailed``,
    ``DeadlineExceeded``, ``SubmissionFailed``, ...) or ``Complete`` with a Ray job that did not succeed.

    :param name: the RayJob's name.
    :param namespace: its namespace.
    :param deployment_status: its final ``status.jobDeploymentStatus``.
    :param reason: its ``status.reason``.
    """

    name: str
    namespace: str
    deployment_status: str
    reason: str = ""


@dataclass(eq=False, repr=False, kw_only=True)
class RayTaskError(RayJobError):
    """A ``@task.ray`` job did not return its function's value (the driver said why, or the job died).

    :param stage: where it failed in the job: ``setup`` (interpreter mismatch, unpickling), ``function``
        or ``result`` (the value could not travel back); ``""`` when the job left no message.
    :param remote_type: the exception's type in the job (``ValueError``, ``mypkg.MyError``).
    :param remote_message: its message.
    :param remote_traceback: its formatted traceback, as the job printed it.
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
    """A Ray cluster could not be created, reached or deleted.

    :param name: the cluster's name.
    :param namespace: its Kubernetes namespace (``None`` for the local backend).
    """

    name: str
    namespace: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class RayClusterNotReadyError(RayClusterError):
    """The cluster did not become ready in time; carries its last conditions."""

    conditions: list[dict[str, Any]] = field(default_factory=list)


@dataclass(eq=False, repr=False, kw_only=True)
class MetricsArtifactError(RayProviderError):
    """An artifact is missing, partial, corrupt or of an unsupported schema.

    :param uri: the file or folder that was read.
    :param problem: a short tag: ``missing``, ``partial``, ``corrupt``, ``schema``.
    """

    uri: str
    problem: str

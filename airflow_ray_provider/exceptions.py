"""Every error this provider raises, in one tree under :class:`RayProviderError`, with no Airflow import.

Each carries the fields a user needs to act on it, and its message says what to do next. The tree imports
no Airflow, so the run lifecycle (:mod:`airflow_ray_provider.launch`), the ``airflow-ray`` CLI and the
operators raise the same plain errors; Airflow fails a task on any of them as on any exception (and
retries it as configured). Two layers keep their own errors: the KubeRay client layer
(:mod:`airflow_ray_provider.kuberay.errors`) and the code that runs inside Ray jobs
(:mod:`airflow_ray_provider.workloads.common.errors`); the layers above wrap them in the errors below,
raised ``from`` the original.

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


class RayProviderError(Exception):
    """Base class of every error this provider raises."""


class RayInvalidInputError(RayProviderError, ValueError):
    """Bad operator input, found before any cluster or job was created."""


class InvalidClusterHandleError(RayInvalidInputError):
    """A value passed as a cluster handle is not one (not the XCom of ``CreateRayClusterOperator``)."""


class PolicyError(RayInvalidInputError):
    """The champion-vs-challenger decision policy is malformed; the message says which field to fix."""


class RayDashboardUnreachableError(RayProviderError):
    """The Ray dashboard (Job API) did not answer after retries.

    :param url: the dashboard URL that was tried.
    :param conn_id: the connection (or cluster handle) the URL came from.
    """

    def __init__(self, message: str, *, url: str, conn_id: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.conn_id = conn_id


class RayJobApiError(RayProviderError):
    """The Ray Job API answered with an error that retrying will not fix (e.g. 400, 401, 404).

    :param http_status: the HTTP status code the Job API answered with.
    :param url: the URL that was called (never carries credentials).
    """

    def __init__(self, message: str, *, http_status: int, url: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.url = url


class RayJobAlreadyExistsError(RayJobApiError):
    """A job with this submission id already exists (Ray answers 500 "already exists"); re-attach to it."""


class RayJobError(RayProviderError):
    """A Ray job ended badly.

    :param submission_id: the job's submission id.
    :param status: its final Ray ``JobStatus`` value.
    :param log_tail: the last lines of its driver log.
    """

    def __init__(self, message: str, *, submission_id: str, status: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.submission_id = submission_id
        self.status = status
        self.log_tail = log_tail


class RayJobFailedError(RayJobError):
    """The job's entrypoint failed (``FAILED``); carries the driver's exit code when Ray reports it."""

    def __init__(
        self,
        message: str,
        *,
        submission_id: str,
        status: str = "FAILED",
        log_tail: str = "",
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message, submission_id=submission_id, status=status, log_tail=log_tail)
        self.exit_code = exit_code


class RayJobStoppedError(RayJobError):
    """The job was stopped (``STOPPED``) by a user, a kill or another system."""


class RayJobTimeoutError(RayJobError):
    """The job ran past ``job_timeout``; it was stopped."""


class KubeRayJobError(RayJobError):
    """A KubeRay RayJob ended without success: ``Failed`` (its reason says why: ``AppFailed``,
    ``DeadlineExceeded``, ``SubmissionFailed``, ...) or ``Complete`` with a Ray job that did not succeed.

    :param name: the RayJob's name.
    :param namespace: its namespace.
    :param deployment_status: its final ``status.jobDeploymentStatus``.
    :param reason: its ``status.reason``.
    """

    def __init__(
        self,
        message: str,
        *,
        submission_id: str,
        status: str,
        name: str,
        namespace: str,
        deployment_status: str,
        reason: str = "",
        log_tail: str = "",
    ) -> None:
        super().__init__(message, submission_id=submission_id, status=status, log_tail=log_tail)
        self.name = name
        self.namespace = namespace
        self.deployment_status = deployment_status
        self.reason = reason


class RayTaskError(RayJobError):
    """A ``@task.ray`` job did not return its function's value (the driver said why, or the job died).

    :param stage: where it failed in the job: ``setup`` (interpreter mismatch, unpickling), ``function``
        or ``result`` (the value could not travel back); ``""`` when the job left no message.
    :param remote_type: the exception's type in the job (``ValueError``, ``mypkg.MyError``).
    :param remote_message: its message.
    :param remote_traceback: its formatted traceback, as the job printed it.
    """

    def __init__(
        self,
        message: str,
        *,
        submission_id: str,
        status: str = "FAILED",
        stage: str = "",
        remote_type: str = "",
        remote_message: str = "",
        remote_traceback: str = "",
        log_tail: str = "",
    ) -> None:
        super().__init__(message, submission_id=submission_id, status=status, log_tail=log_tail)
        self.stage = stage
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback


class RayTaskFunctionError(RayTaskError):
    """The ``@task.ray`` function raised in the Ray job; carries the remote type, message and traceback."""


class RayClusterError(RayProviderError):
    """A Ray cluster could not be created, reached or deleted.

    :param name: the cluster's name.
    :param namespace: its Kubernetes namespace (``None`` for the local backend).
    """

    def __init__(self, message: str, *, name: str, namespace: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.namespace = namespace


class RayClusterNotReadyError(RayClusterError):
    """The cluster did not become ready in time; carries its last conditions."""

    def __init__(
        self,
        message: str,
        *,
        name: str,
        namespace: str | None = None,
        conditions: list[dict] | None = None,
    ) -> None:
        super().__init__(message, name=name, namespace=namespace)
        self.conditions = conditions or []


class MetricsArtifactError(RayProviderError):
    """An artifact is missing, partial, corrupt or of an unsupported schema.

    :param uri: the file or folder that was read.
    :param problem: a short tag: ``missing``, ``partial``, ``corrupt``, ``schema``.
    """

    def __init__(self, message: str, *, uri: str, problem: str) -> None:
        super().__init__(message)
        self.uri = uri
        self.problem = problem

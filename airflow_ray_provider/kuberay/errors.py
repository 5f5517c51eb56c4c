"""Errors of the KubeRay client layer (no Airflow imports; the operators wrap them)."""

from __future__ import annotations


class KubeRayError(RuntimeError):
    """Base class of every error raised by :mod:`airflow_ray_provider.kuberay`."""


class KubeRaySpecError(KubeRayError, ValueError):
    """A RayCluster spec or manifest is invalid; raised before any API call. The message says what to fix."""


class KubeRayApiError(KubeRayError):
    """The Kubernetes API answered with an error that retrying will not fix.

    :param status: the HTTP status code (``0`` when there was no answer).
    :param reason: the API's reason text.
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeRayNotFoundError(KubeRayApiError):
    """The object does not exist (HTTP 404)."""


class KubeRayConflictError(KubeRayApiError):
    """The object already exists (HTTP 409)."""


class KubeRayTimeoutError(KubeRayError):
    """A wait ran out of time; carries the last conditions seen.

    :param conditions: the RayCluster's last ``status.conditions``.
    """

    def __init__(self, message: str, *, conditions: list[dict] | None = None) -> None:
        super().__init__(message)
        self.conditions = conditions or []

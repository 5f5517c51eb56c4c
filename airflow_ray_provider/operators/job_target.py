"""Which cluster a Ray job task talks to: shared by ``SubmitRayJobOperator`` and ``RayJobSensor``."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow_ray_provider.clusters.handle import InvalidClusterHandleError, RayClusterHandle
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.ray_job import RayJobHook


def check_target_arguments(cluster: Any, ray_conn_id: str | None) -> None:
    """Reject both a cluster handle and a connection id (checked again after templating)."""
    if cluster is not None and ray_conn_id:
        raise RayInvalidInputError("pass either cluster (a cluster handle) or ray_conn_id, not both")


def resolve_target(cluster: Any, ray_conn_id: str | None) -> tuple[str | None, dict[str, Any] | None]:
    """Validate the target cluster: a handle (XCom of the create-cluster task) or a connection id.

    :returns: ``(ray_conn_id, cluster_dict)``; the connection defaults to ``ray_default``.
    :raises RayInvalidInputError: for both or a malformed handle.
    """
    check_target_arguments(cluster, ray_conn_id)
    if cluster is None:
        return ray_conn_id or RayJobHook.default_conn_name, None
    try:
        return None, RayClusterHandle.from_dict(cluster).to_dict()
    except InvalidClusterHandleError as exc:
        raise RayInvalidInputError(str(exc)) from exc


class RayJobTargetMixin:
    """``_target`` and ``hook`` for a task with ``cluster``, ``ray_conn_id`` and ``retry_attempts``."""

    cluster: Any
    ray_conn_id: str | None
    retry_attempts: int

    @cached_property
    def _target(self) -> tuple[str | None, dict[str, Any] | None]:
        return resolve_target(self.cluster, self.ray_conn_id)

    @cached_property
    def hook(self) -> RayJobHook:
        """The Job API hook for the target cluster (built after templates are rendered)."""
        conn_id, cluster = self._target
        return RayJobHook(conn_id, cluster=cluster, retry_attempts=self.retry_attempts)

"""Which cluster backend a cluster connection, or a cluster handle, means: decided here and nowhere else.

No connection (``None``) means the local backend, an ephemeral Ray head on this machine; a connection
of type ``kuberay`` means the KubeRay backend, its client built from that connection by
:class:`~airflow_ray_provider.hooks.kuberay.KubeRayHook`. A handle names its backend and, for KubeRay,
its connection. The RayJob path (:class:`~airflow_ray_provider.clusters.rayjob.KubeRayJobs`) needs a
``kuberay`` connection, and composes that connection's KubeRay backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_ray_provider.clusters.handle import RayClusterHandle
from airflow_ray_provider.clusters.kuberay import KubeRayBackend, KubeRaySettings
from airflow_ray_provider.clusters.local import LocalBackend
from airflow_ray_provider.clusters.rayjob import KubeRayJobs
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import KubeRayHook

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_ray_provider.clusters.backend import ClusterBackend


def _kuberay(conn_id: str, connection: Connection, namespace: str | None) -> KubeRayBackend:
    if connection.conn_type != KubeRayHook.conn_type:
        raise RayInvalidInputError(
            f"cluster_conn_id {conn_id!r} has type {connection.conn_type!r}; use a connection of type "
            "'kuberay' for KubeRay, or cluster_conn_id=None for a local ephemeral Ray head"
        )
    hook = KubeRayHook(conn_id, namespace=namespace, connection=connection)
    settings = KubeRaySettings(
        conn_id=conn_id, namespace=hook.namespace, default_image=hook.default_image,
        dashboard_url_template=hook.dashboard_url_template, ray_auth=hook.ray_auth,
        link_url_template=hook.link_url_template,
    )  # fmt: skip
    return KubeRayBackend(settings, lambda: hook.client)


def backend_for_connection(conn_id: str | None, *, namespace: str | None = None) -> ClusterBackend:
    """The backend of a cluster connection: ``None`` is the local backend, a ``kuberay`` one KubeRay.

    :param conn_id: the cluster connection id, or ``None``.
    :param namespace: overrides the connection's namespace (KubeRay).
    :raises RayInvalidInputError: for a connection of another type.
    """
    if conn_id is None:
        return LocalBackend()
    return _kuberay(conn_id, KubeRayHook.get_connection(conn_id), namespace)


async def abackend_for_connection(conn_id: str | None, *, namespace: str | None = None) -> ClusterBackend:
    """:func:`backend_for_connection` for the triggerer: the connection is fetched without blocking."""
    if conn_id is None:
        return LocalBackend()
    return _kuberay(conn_id, await KubeRayHook.aget_connection(conn_id), namespace)


def backend_for_handle(handle: RayClusterHandle, *, conn_id: str | None = None) -> ClusterBackend:
    """The backend that created the cluster of a handle.

    :param handle: the create task's handle.
    :param conn_id: the connection to use when a KubeRay handle names none.
    :raises RayInvalidInputError: for a KubeRay handle without any connection.
    """
    if handle.backend == "local":
        return LocalBackend()
    conn = handle.conn_id or conn_id
    if not conn:
        raise RayInvalidInputError(f"handle of {handle.name} names no connection; set cluster_conn_id")
    return backend_for_connection(conn, namespace=handle.namespace)


def _rayjob_conn(conn_id: str | None) -> str:
    if not conn_id:
        raise RayInvalidInputError(
            "a KubeRay RayJob needs cluster_conn_id, a connection of type 'kuberay'; to run on this "
            "machine, use EphemeralRayJobOperator or CreateRayClusterOperator with cluster_conn_id=None"
        )
    return conn_id


def rayjobs_for_connection(conn_id: str | None, *, namespace: str | None = None) -> KubeRayJobs:
    """RayJobs through a ``kuberay`` connection.

    :raises RayInvalidInputError: without a connection, or for a connection of another type.
    """
    conn = _rayjob_conn(conn_id)
    return KubeRayJobs(_kuberay(conn, KubeRayHook.get_connection(conn), namespace))


async def arayjobs_for_connection(conn_id: str | None, *, namespace: str | None = None) -> KubeRayJobs:
    """:func:`rayjobs_for_connection` for the triggerer: the connection is fetched without blocking."""
    conn = _rayjob_conn(conn_id)
    return KubeRayJobs(_kuberay(conn, await KubeRayHook.aget_connection(conn), namespace))

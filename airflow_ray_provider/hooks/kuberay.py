"""The ``kuberay`` connection type (its Extra: :mod:`..connection_forms`): how Airflow reaches the Kubernetes
API that KubeRay watches, never through a globally loaded kubeconfig; and which backend a connection or a
handle means."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseHook

from airflow_ray_provider.clusters import RayClusterHandle
from airflow_ray_provider.clusters.kuberay import KubeRayBackend, KubeRaySettings
from airflow_ray_provider.clusters.local import LocalBackend
from airflow_ray_provider.exceptions import RayInvalidInputError

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from kubernetes.client import ApiClient

    from airflow_ray_provider.clusters.backend import ClusterBackend
    from airflow_ray_provider.kuberay import KubeRayClient


class KubeRayHook(BaseHook):
    """Reach RayClusters through a ``kuberay`` connection.

    :param namespace: overrides the connection's namespace.
    :param connection: an already fetched connection.
    """

    conn_name_attr = "kuberay_conn_id"
    default_conn_name = "kuberay_default"
    conn_type = "kuberay"
    hook_name = "KubeRay (Kubernetes)"

    def __init__(
        self,
        kuberay_conn_id: str = default_conn_name,
        *,
        namespace: str | None = None,
        connection: Connection | None = None,
    ) -> None:
        super().__init__()
        self.kuberay_conn_id = kuberay_conn_id
        self._namespace = namespace
        self._connection = connection

    @cached_property
    def extras(self) -> dict[str, Any]:
        """The connection's Extra."""
        return (self._connection or self.get_connection(self.kuberay_conn_id)).extra_dejson or {}

    @property
    def namespace(self) -> str:
        """The namespace calls default to."""
        return self._namespace or self.extras.get("namespace") or "default"

    @cached_property
    def settings(self) -> KubeRaySettings:
        """What the connection says about the clusters it creates (the backend's settings).

        :raises RayInvalidInputError: naming the connection and the extra, for a bad ``ray_auth`` or
            ``link_url_template`` (checked before any cluster exists).
        """
        from airflow_ray_provider.clusters import cluster_link_url
        from airflow_ray_provider.kuberay import AUTH_MODES

        extras = self.extras
        ray_auth = extras.get("ray_auth") or "auth_options"
        if ray_auth not in AUTH_MODES:
            raise RayInvalidInputError(
                f"connection {self.kuberay_conn_id!r}: Extra ray_auth must be one of {list(AUTH_MODES)}, "
                f"got {ray_auth!r}"
            )
        link = extras.get("link_url_template") or None
        if link is not None:
            cluster_link_url(str(link), "name", "namespace")
        return KubeRaySettings(
            conn_id=self.kuberay_conn_id, namespace=self.namespace, ray_auth=str(ray_auth),
            default_image=extras.get("default_image") or None, link_url_template=link,
            dashboard_url_template=extras.get("dashboard_url_template") or None,
        )  # fmt: skip

    @cached_property
    def api_client(self) -> ApiClient:
        """A Kubernetes ``ApiClient`` for this connection; no global configuration is touched.

        :raises RayInvalidInputError: naming the connection and the Extra to fix.
        """
        import os

        import yaml
        from kubernetes import client, config

        extras, context = self.extras, self.extras.get("context") or None
        source = f"connection {self.kuberay_conn_id!r}"
        if str(extras.get("in_cluster")).strip().lower() in ("1", "true", "yes", "on"):  # a form's or JSON's
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # its token refreshed
            return client.ApiClient(configuration)
        inline = extras.get("kube_config")
        if inline:
            try:
                loaded = inline if isinstance(inline, dict) else yaml.safe_load(inline)  # JSON is YAML too
            except yaml.YAMLError as exc:
                raise RayInvalidInputError(f"{source}: kube_config is neither JSON nor YAML") from exc
            if not isinstance(loaded, dict):
                raise RayInvalidInputError(f"{source}: kube_config must be a mapping")
            return config.new_client_from_config_dict(loaded, context=context, persist_config=False)
        if not extras.get("kube_config_path"):
            raise RayInvalidInputError(
                f"{source} sets none of in_cluster, kube_config_path or kube_config; set one of them in its "
                "Extra"
            )
        path = str(extras["kube_config_path"])
        where = f"{source}: Extra kube_config_path {path!r}"
        if not os.path.isfile(os.path.expanduser(path)):
            raise RayInvalidInputError(
                f"{where} is not a file on this worker; mount the kubeconfig there, or use kube_config "
                "(inline) or in_cluster: true instead"
            )
        try:
            return config.new_client_from_config(
                config_file=os.path.expanduser(path), context=context, persist_config=False
            )
        except config.ConfigException as exc:
            raise RayInvalidInputError(f"{where} is not a usable kubeconfig: {exc}") from exc

    @cached_property
    def client(self) -> KubeRayClient:
        """The typed RayCluster client for this connection's namespace."""
        from airflow_ray_provider.kuberay import KubeRayClient

        return KubeRayClient(self.api_client, namespace=self.namespace)

    def get_conn(self) -> KubeRayClient:
        """Return the typed RayCluster client."""
        return self.client

    def test_connection(self) -> tuple[bool, str]:
        """List RayClusters in the namespace: proves the credentials, the CRD and the Role's ``list``."""
        try:
            found = self.client.list_labelled()
        except Exception as exc:
            return False, f"cannot list RayClusters in namespace {self.namespace!r}: {exc}"
        return True, f"connected; {len(found)} RayCluster(s) in namespace {self.namespace!r}"


# ------------------------------------------------------------- which backend a connection or handle means
def backend_for_connection(conn_id: str | None, *, namespace: str | None = None) -> ClusterBackend:
    """The backend of a cluster connection: ``None`` is the local backend, a ``kuberay`` one KubeRay. The
    credentials of the Job API clients it makes are registered with Airflow's secrets masker.

    :param namespace: overrides the connection's namespace (KubeRay).
    :raises RayInvalidInputError: for a connection of another type.
    """
    from airflow.sdk.log import mask_secret

    backend: ClusterBackend = LocalBackend()
    if conn_id is not None:
        connection = KubeRayHook.get_connection(conn_id)
        if connection.conn_type != KubeRayHook.conn_type:
            raise RayInvalidInputError(
                f"cluster_conn_id {conn_id!r} has type {connection.conn_type!r}; use a connection of type "
                "'kuberay' for KubeRay, or cluster_conn_id=None for a local ephemeral Ray head"
            )
        hook = KubeRayHook(conn_id, namespace=namespace, connection=connection)
        backend = KubeRayBackend(hook.settings, lambda: hook.client)
    backend.mask = mask_secret
    return backend


def backend_for_handle(handle: RayClusterHandle, *, conn_id: str | None = None) -> ClusterBackend:
    """The backend that created the cluster of a handle.

    :param conn_id: the connection to use when a KubeRay handle names none.
    :raises RayInvalidInputError: for a KubeRay handle without any connection.
    """
    if handle.backend == "local":
        return backend_for_connection(None)
    conn = handle.conn_id or conn_id
    if not conn:
        raise RayInvalidInputError(f"handle of {handle.name} names no connection; set cluster_conn_id")
    return backend_for_connection(conn, namespace=handle.namespace)


def rayjobs_for_connection(conn_id: str | None, *, namespace: str | None = None) -> KubeRayBackend:
    """The backend a KubeRay RayJob goes through: a ``kuberay`` connection's.

    :raises RayInvalidInputError: without a connection, or for a connection of another type.
    """
    if not conn_id:
        raise RayInvalidInputError(
            "a KubeRay RayJob needs cluster_conn_id, a connection of type 'kuberay'; to run on this "
            "machine, use EphemeralRayJobOperator or CreateRayClusterOperator with cluster_conn_id=None"
        )
    return cast("KubeRayBackend", backend_for_connection(conn_id, namespace=namespace))

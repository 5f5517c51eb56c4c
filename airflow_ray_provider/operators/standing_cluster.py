"""``AttachRayClusterOperator``: use a standing Ray cluster by name, never deleting it.

It turns a RayCluster name (in a ``kuberay`` connection's namespace), or a running local head's name,
into a cluster handle marked *not owned*: the same handle ``CreateRayClusterOperator`` pushes, so
``SubmitRayJobOperator``, ``RayJobSensor``, ``KubeRayJobOperator`` and both templates take it as
``cluster=attach.output``, while ``DeleteRayClusterOperator`` and the janitor leave the cluster alone.
No hand-made ``ray`` connection with a pasted dashboard URL and token is needed: the token stays in the
cluster's Secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.cluster_backend import backend_for_connection

if TYPE_CHECKING:
    from airflow.sdk import Context


class AttachRayClusterOperator(BaseOperator):
    """Check a standing cluster now (ready, dashboard answering with its token) and push its handle.

    A cluster that does not exist, is not ready or whose dashboard does not answer fails the task at once
    with the cluster's conditions (no waiting).

    :param cluster_name: the RayCluster's name (templated).
    :param cluster_conn_id: a ``kuberay`` connection, or ``None`` for a local head on this machine.
    :param namespace: overrides the connection's namespace.
    """

    template_fields = ("cluster_name", "namespace")
    ui_color = "#e0f0d0"

    def __init__(
        self,
        *,
        cluster_name: str,
        cluster_conn_id: str | None = None,
        namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster_name = cluster_name
        self.cluster_conn_id = cluster_conn_id
        self.namespace = namespace

    def execute(self, context: Context) -> dict[str, Any]:
        """Return the handle (``owned=False``) of the standing cluster."""
        if not isinstance(self.cluster_name, str) or not self.cluster_name.strip():
            raise RayInvalidInputError(f"cluster_name must name a running cluster, got {self.cluster_name!r}")
        backend = backend_for_connection(self.cluster_conn_id, namespace=self.namespace)
        try:
            handle = backend.attach(self.cluster_name.strip())
        finally:
            backend.close()
        self.log.info(
            "Attached to standing Ray cluster %s (%s); dashboard %s; it is never deleted by this DAG",
            handle.name, handle.backend, handle.dashboard_url,
        )  # fmt: skip
        return handle.to_dict()

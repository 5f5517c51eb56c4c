"""``AttachRayClusterOperator``: use a standing Ray cluster by name, never deleting it.

It turns a RayCluster name (in a ``kuberay`` connection's namespace), or a running local head's name,
into a cluster handle marked *not owned*: the same handle ``CreateRayClusterOperator`` pushes, so
``SubmitRayJobOperator``, ``RayJobSensor``, ``KubeRayJobOperator`` and both templates take it as
``cluster=attach.output``, while ``DeleteRayClusterOperator`` and the janitor leave the cluster alone.
No hand-made ``ray`` connection with a pasted dashboard URL and token is needed: the token stays in the
cluster's Secret.

A cluster this provider did not start (a head started with ``ray start --head``, with Ray's token auth)
is attached by its dashboard ``address`` and the file holding its token (``ray get-auth-token`` writes
``~/.ray/auth_token``): the handle refers to the file, never carries the token (docs/launch.md).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_ray_provider.clusters import RayClusterHandle, probe_dashboard
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import backend_for_connection

if TYPE_CHECKING:
    from airflow.sdk import Context


class AttachRayClusterOperator(BaseOperator):
    """Check a standing cluster now (ready, dashboard answering with its token) and push its handle.

    A cluster that does not exist, is not ready or whose dashboard does not answer fails the task at once
    with the cluster's conditions (no waiting).

    :param cluster_name: the RayCluster's name (templated).
    :param cluster_conn_id: a ``kuberay`` connection, or ``None`` for a local head on this machine.
    :param namespace: overrides the connection's namespace.
    :param address: instead of a name, any running cluster's dashboard, ``http(s)://host:port`` (templated).
    :param token_file: with ``address``: the file holding its Ray auth token (``None``: no token auth).
    """

    template_fields = ("cluster_name", "namespace", "address", "token_file")
    ui_color = "#e0f0d0"

    def __init__(
        self,
        *,
        cluster_name: str | None = None,
        cluster_conn_id: str | None = None,
        namespace: str | None = None,
        address: str | None = None,
        token_file: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (cluster_name is None) == (address is None):
            raise RayInvalidInputError(
                "pass cluster_name (a cluster by name) or address (by its dashboard), one"
            )
        if token_file is not None and address is None:
            raise RayInvalidInputError(
                "token_file goes with address (a named cluster's token is found for you)"
            )
        self.address = address
        self.token_file = token_file
        self.cluster_name = cluster_name
        self.cluster_conn_id = cluster_conn_id
        self.namespace = namespace

    def execute(self, context: Context) -> dict[str, Any]:
        """Return the handle (``owned=False``) of the standing cluster."""
        if self.address is not None:
            return self._by_address(self.address, self.token_file)
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

    def _by_address(self, address: str, token_file: str | None) -> dict[str, Any]:
        """A handle (never owned) to the cluster whose dashboard answers at ``address`` with the token."""
        if not isinstance(address, str) or not address.startswith(("http://", "https://")):
            raise RayInvalidInputError(f"address must be a dashboard's http(s)://host:port, got {address!r}")
        token = None
        if token_file is not None:
            token_file = os.path.expanduser(token_file)
            try:
                with open(token_file) as handle_file:
                    token = handle_file.read().strip()
            except OSError as exc:
                raise RayInvalidInputError(
                    f"token_file {token_file!r} cannot be read: {exc.strerror}"
                ) from exc
        answered, detail = probe_dashboard(address.rstrip("/"), token)
        if not answered:
            raise RayClusterNotReadyError(
                f"the Ray dashboard at {address} does not answer: {detail}", name=address
            )
        name = re.sub(r"[^a-z0-9]+", "-", address.split("://", 1)[1].lower()).strip("-")
        handle = RayClusterHandle(
            backend="local",
            name=f"address-{name}",
            dashboard_url=address.rstrip("/"),
            auth_token_file=token_file,
            owned=False,
            extra={"address": address},
        )
        self.log.info(
            "Attached to the Ray cluster at %s (Ray %s); it is never deleted by this DAG", address, detail
        )
        return handle.to_dict()

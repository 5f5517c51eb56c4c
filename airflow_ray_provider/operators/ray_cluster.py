"""Ephemeral Ray clusters for exactly as long as a DAG run needs them: create, delete (teardown), janitor.

Backend rule: ``cluster_conn_id=None`` starts a local ephemeral Ray head (the embedded default); a
connection of type ``kuberay`` creates a KubeRay RayCluster. Both push the same handle, so the same DAG
runs on either by changing only the connection.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, conf

from airflow_ray_provider.clusters.backends import (
    ClusterRequest,
    KubeRayBackend,
    TaskIdentity,
    create_local,
    delete_local,
)
from airflow_ray_provider.clusters.handle import InvalidClusterHandleError, RayClusterHandle
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.kuberay.errors import KubeRaySpecError
from airflow_ray_provider.kuberay.spec import RayClusterSpec, validate_spec

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.local.cluster import LocalClusterOptions

EVENT_STATUSES = ("ready", "timeout", "failed", "error")


def _kuberay_backend(conn_id: str, namespace: str | None = None) -> KubeRayBackend:
    from airflow_ray_provider.hooks.kuberay import KubeRayHook

    connection = KubeRayHook.get_connection(conn_id)
    conn_type = connection.conn_type
    if conn_type != "kuberay":
        raise RayInvalidInputError(
            f"cluster_conn_id {conn_id!r} has type {conn_type!r}; use a connection of type 'kuberay' for "
            "KubeRay, or cluster_conn_id=None for a local ephemeral Ray head"
        )
    return KubeRayBackend(KubeRayHook(conn_id, namespace=namespace, connection=connection))


def _as_timedelta(value: timedelta | float, what: str) -> timedelta:
    result = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if result.total_seconds() <= 0:
        raise RayInvalidInputError(f"{what} must be positive, got {value!r}")
    return result


class CreateRayClusterOperator(BaseOperator):
    """Provision a Ray cluster and push its handle (``RayClusterHandle.to_dict()``) to XCom.

    Ready means the head is ready AND the dashboard's ``/api/version`` answers. A retry of the same task
    instance finds and reuses the cluster its earlier try created. When the cluster is not ready in
    ``ready_timeout`` it is deleted and the task fails with the cluster's conditions.

    :param cluster_conn_id: ``None`` for a local ephemeral head, or a ``kuberay`` connection.
    :param spec: a :class:`RayClusterSpec` or a dict of its fields (head, worker_groups, image, ...).
    :param manifest: instead of ``spec``: a full RayCluster manifest (dict, YAML text or a ``.yaml`` path),
        sent unchanged except for the ownership labels and annotations.
    :param cluster_name: a fixed name (default: generated from dag_id, run_id, task_id and map index).
    :param name_prefix: prefix of generated names.
    :param namespace: overrides the connection's namespace.
    :param dashboard_url_template: overrides how the dashboard is reached (ingress, port-forward), e.g.
        ``https://{name}.ray.example.com``; fields: name, namespace, service_name, service_ip, pod_ip,
        dashboard_port. Default: the connection's template, else the head service's in-cluster DNS name.
    :param local_options: options of the local backend (:class:`LocalClusterOptions` or a dict).
    :param ready_timeout: seconds to wait for readiness.
    :param poll_interval: seconds between readiness checks.
    :param expiry: lifetime after which the janitor may delete the cluster (timedelta or seconds).
    :param deferrable: wait in the triggerer (KubeRay only; the local head starts within the task).
    """

    template_fields = ("spec", "manifest", "cluster_name", "namespace", "dashboard_url_template")
    template_fields_renderers = {"spec": "json", "manifest": "yaml"}
    template_ext = (".yaml", ".yml")
    ui_color = "#c6e6ff"

    def __init__(
        self,
        *,
        cluster_conn_id: str | None = None,
        spec: RayClusterSpec | dict[str, Any] | None = None,
        manifest: dict[str, Any] | str | None = None,
        cluster_name: str | None = None,
        name_prefix: str = "ray",
        namespace: str | None = None,
        dashboard_url_template: str | None = None,
        local_options: LocalClusterOptions | dict[str, Any] | None = None,
        ready_timeout: float = 900.0,
        poll_interval: float = 5.0,
        expiry: timedelta | float = timedelta(hours=24),
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if spec is not None and manifest is not None:
            raise RayInvalidInputError("pass either spec or manifest, not both")
        if isinstance(spec, RayClusterSpec):
            try:
                validate_spec(spec)
            except KubeRaySpecError as exc:
                raise RayInvalidInputError(str(exc)) from exc
        if ready_timeout <= 0 or poll_interval <= 0:
            raise RayInvalidInputError("ready_timeout and poll_interval must be positive")
        self.cluster_conn_id = cluster_conn_id
        # Kept as plain data: templates render it and the DAG serializer stores it.
        self.spec = dataclasses.asdict(spec) if isinstance(spec, RayClusterSpec) else spec
        self.manifest = manifest
        self.cluster_name = cluster_name
        self.name_prefix = name_prefix
        self.namespace = namespace
        self.dashboard_url_template = dashboard_url_template
        self.local_options = local_options
        self.ready_timeout = ready_timeout
        self.poll_interval = poll_interval
        self.expiry = _as_timedelta(expiry, "expiry")
        self.deferrable = deferrable

    def _request(self) -> ClusterRequest:
        from airflow_ray_provider.local.cluster import LocalClusterOptions

        try:
            spec = RayClusterSpec.from_dict(self.spec) if self.spec is not None else None
            options = LocalClusterOptions.from_value(self.local_options)
        except (KubeRaySpecError, ValueError, TypeError) as exc:
            raise RayInvalidInputError(str(exc)) from exc
        return ClusterRequest(
            spec=spec, manifest=self.manifest, cluster_name=self.cluster_name, name_prefix=self.name_prefix,
            namespace=self.namespace, dashboard_url_template=self.dashboard_url_template,
            local_options=options, ready_timeout=self.ready_timeout, poll_interval=self.poll_interval,
            expiry=self.expiry,
        )  # fmt: skip

    def execute(self, context: Context) -> dict[str, Any]:
        """Create (or reuse) the cluster, wait until it is ready, return its handle."""
        request, identity = self._request(), TaskIdentity.from_context(context)
        if self.cluster_conn_id is None:
            handle = create_local(request, identity)
            self.log.info("Local Ray head %s ready at %s", handle.name, handle.dashboard_url)
            return handle.to_dict()
        backend = _kuberay_backend(self.cluster_conn_id, self.namespace)
        plan = backend.plan(request, identity)  # validates everything before the first API call
        backend.ensure_created(plan)
        template = self.dashboard_url_template or backend.hook.dashboard_url_template
        if self.deferrable:
            check = backend.check_once(plan, template)  # a retry may find its cluster ready already
            if check.verdict == "failed":
                backend.fail(plan, check.message, check.conditions)
            if check.verdict != "ready":
                self._defer(plan, backend, template)
            url = check.dashboard_url
        else:
            url = backend.wait(plan, request, template)
        self.log.info("RayCluster %s/%s ready; dashboard %s", plan.namespace, plan.name, url)
        return backend.handle(plan, url).to_dict()

    def _defer(self, plan: Any, backend: KubeRayBackend, template: str | None) -> None:
        from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger

        ref = plan.token_ref
        self.defer(
            trigger=RayClusterReadyTrigger(
                conn_id=backend.hook.kuberay_conn_id,
                name=plan.name,
                namespace=plan.namespace,
                dashboard_url_template=template,
                token_secret=ref.secret_name if ref else None,
                token_key=ref.key if ref else "auth_token",
                timeout=self.ready_timeout,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.ready_timeout + 300),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Finish after the trigger: return the handle, or delete the cluster and fail."""
        if not isinstance(event, dict) or event.get("status") not in EVENT_STATUSES:
            raise RayClusterNotReadyError(
                f"unexpected trigger event {event!r}", name=self.cluster_name or "?"
            )
        backend = _kuberay_backend(self.cluster_conn_id or "", self.namespace)
        plan = backend.plan(self._request(), TaskIdentity.from_context(context))
        if event["status"] != "ready":
            backend.fail(plan, str(event.get("message", "")), list(event.get("conditions") or []))
        self.log.info(
            "RayCluster %s/%s ready; dashboard %s", plan.namespace, plan.name, event["dashboard_url"]
        )
        return backend.handle(plan, event["dashboard_url"]).to_dict()


class DeleteRayClusterOperator(BaseOperator):
    """Delete a cluster; meant as a teardown task (``.as_teardown(setups=create)``).

    Idempotent: a cluster that is already gone counts as deleted. Waits until the RayCluster object is
    gone (KubeRay) or the head's processes are (local). Without a handle (the create task pushed none),
    it deletes the clusters this DAG run's create tasks labelled, through ``cluster_conn_id``.

    :param cluster: the create task's handle (``create.output``).
    :param cluster_conn_id: used when the handle names no connection, and for the no-handle fallback.
    :param wait_for_deletion: wait until the cluster is gone.
    :param delete_timeout: seconds to wait.
    """

    template_fields = ("cluster",)
    ui_color = "#ffd6d6"

    def __init__(
        self,
        *,
        cluster: RayClusterHandle | dict[str, Any] | None = None,
        cluster_conn_id: str | None = None,
        wait_for_deletion: bool = True,
        delete_timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster
        self.cluster_conn_id = cluster_conn_id
        self.wait_for_deletion = wait_for_deletion
        self.delete_timeout = delete_timeout

    def execute(self, context: Context) -> dict[str, Any]:
        """Delete the cluster; returns ``{"name", "backend", "deleted"}`` (``deleted``: it existed)."""
        if not self.cluster:
            return self._delete_for_run(context)
        try:
            handle = RayClusterHandle.from_dict(self.cluster)
        except InvalidClusterHandleError as exc:
            raise RayInvalidInputError(str(exc)) from exc
        if handle.backend == "local":
            deleted = delete_local(handle)
        else:
            conn_id = handle.conn_id or self.cluster_conn_id
            if not conn_id:
                raise RayInvalidInputError(
                    f"handle of {handle.name} names no connection; set cluster_conn_id"
                )
            backend = _kuberay_backend(conn_id, handle.namespace)
            deleted = backend.delete(
                handle.name, handle.namespace or backend.hook.namespace, _token_ref(handle),
                wait=self.wait_for_deletion, timeout=self.delete_timeout,
            )  # fmt: skip
        self.log.info("Ray cluster %s %s", handle.name, "deleted" if deleted else "was already gone")
        return {"name": handle.name, "backend": handle.backend, "deleted": deleted}

    def _delete_for_run(self, context: Context) -> dict[str, Any]:
        labels = TaskIdentity.from_context(context).run_labels()
        if self.cluster_conn_id is None:
            from airflow_ray_provider.local.cluster import list_clusters, stop_cluster
            from airflow_ray_provider.local.head import LocalHeadInfo

            names = [r["info"]["name"] for r in list_clusters(labels)]
            for record in list_clusters(labels):
                stop_cluster(LocalHeadInfo.from_dict(record["info"]))
        else:
            backend = _kuberay_backend(self.cluster_conn_id)
            names = backend.delete_labelled(
                labels, backend.hook.namespace, wait=self.wait_for_deletion, timeout=self.delete_timeout
            )
        self.log.warning("No cluster handle was passed; deleted this run's clusters by label: %s", names)
        return {"name": None, "backend": "kuberay" if self.cluster_conn_id else "local", "deleted": names}


def _token_ref(handle: RayClusterHandle) -> Any:
    from airflow_ray_provider.kuberay.builder import TokenRef

    if not handle.auth_token_secret:
        return None
    created = bool((handle.extra or {}).get("token_secret_created"))
    return TokenRef(handle.auth_token_secret, handle.auth_token_secret_key or "auth_token", created)


class RayClusterJanitorOperator(BaseOperator):
    """Delete provider-created clusters whose expiry annotation has passed (orphans of killed runs).

    :param cluster_conn_id: a ``kuberay`` connection, or ``None`` for this machine's local heads.
    :param namespace: overrides the connection's namespace.
    :param list_only: only list what would be deleted (a dry run).
    :param wait_for_deletion: wait until each cluster is gone.
    """

    template_fields = ("namespace",)

    def __init__(
        self,
        *,
        cluster_conn_id: str | None = None,
        namespace: str | None = None,
        list_only: bool = False,
        wait_for_deletion: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster_conn_id = cluster_conn_id
        self.namespace = namespace
        self.list_only = list_only
        self.wait_for_deletion = wait_for_deletion

    def execute(self, context: Context) -> list[str]:
        """Return the names of the expired clusters (deleted unless ``list_only``)."""
        if self.cluster_conn_id is None:
            return self._local()
        backend = _kuberay_backend(self.cluster_conn_id, self.namespace)
        namespace = self.namespace or backend.hook.namespace
        names = []
        for obj in backend.expired(namespace):
            name = obj["metadata"]["name"]
            names.append(name)
            self.log.info(
                "%s expired RayCluster %s/%s",
                "Would delete" if self.list_only else "Deleting",
                namespace,
                name,
            )
            if not self.list_only:
                backend.delete_object(obj, namespace, wait=self.wait_for_deletion, timeout=300)
        return names

    def _local(self) -> list[str]:
        from airflow_ray_provider.kuberay.labels import CREATED_BY, LABEL_CREATED_BY
        from airflow_ray_provider.local.cluster import is_record_expired, list_clusters, stop_cluster
        from airflow_ray_provider.local.head import LocalHeadInfo

        names = []
        for record in list_clusters({LABEL_CREATED_BY: CREATED_BY}):
            if is_record_expired(record):
                names.append(record["info"]["name"])
                if not self.list_only:
                    stop_cluster(LocalHeadInfo.from_dict(record["info"]))
        self.log.info("Expired local Ray heads%s: %s", " (dry run)" if self.list_only else "", names)
        return names

"""The cluster operators: create a cluster for a DAG run, delete it, attach a standing one, and the janitor
of what killed runs left behind. A local head and a KubeRay RayCluster push the same handle.
"""

from __future__ import annotations

import dataclasses
import os
import re
from contextlib import closing
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_ray_provider.clusters import (
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    LocalClusterOptions,
    RayClusterHandle,
    RayClusterSpec,
    check_spec,
    event_for,
    probe_dashboard,
    validate_event,
)
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import backend_for_connection, backend_for_handle
from airflow_ray_provider.launch import janitor_sweep, ready_handle, wait_until_ready
from airflow_ray_provider.operators.base import DEFAULT_DEFERRABLE, is_literal, task_identity

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import DAG, Context

    from airflow_ray_provider.clusters import ReadinessEvent


#: ``CreateRayClusterOperator``'s arguments that go to its :class:`ClusterRequest` as they are.
REQUEST_ARGUMENTS = ("manifest", "cluster_name", "name_prefix", "dashboard_url_template", "local_options")


def check_cluster_arguments(
    spec: RayClusterSpec | dict[str, Any] | None,
    manifest: Any,
    cluster_conn_id: str | None,
    *,
    spec_name: str = "spec",
    **seconds: float | timedelta | None,
) -> None:
    """Check a cluster's arguments when the DAG is parsed: ``spec`` or ``manifest``, positive ``seconds``,
    and a spec without Jinja by every rule the connection does not decide (:class:`RayInvalidInputError`)."""
    if spec is not None and manifest is not None:
        raise RayInvalidInputError(f"pass either {spec_name} or manifest, not both")
    numbers = {name: v.total_seconds() if isinstance(v, timedelta) else v for name, v in seconds.items()}
    if bad := [name for name, value in numbers.items() if value is not None and value <= 0]:
        raise RayInvalidInputError(f"{' and '.join(bad)} must be positive")
    if not isinstance(spec, RayClusterSpec) and not (isinstance(spec, dict) and is_literal(spec)):
        return  # nothing, an upstream XCom or a template: checked once it is rendered
    check_spec(spec, default_auth="auth_options" if cluster_conn_id is None else None)


class CreateRayClusterOperator(BaseOperator):
    """Provision a Ray cluster (or reuse its earlier try's) and push its handle; one not ready in
    ``ready_timeout`` is deleted and the task fails with its conditions (arguments: docs/operators.md).

    :param cluster_conn_id: ``None`` for a local ephemeral head, or a ``kuberay`` connection.
    :param manifest: instead of ``spec``: a RayCluster manifest (dict, YAML text or a ``.yaml`` path).
    :param expiry: lifetime after which the janitor may delete the cluster (timedelta or seconds);
        default: the DAG's ``dagrun_timeout``, else 24 h.
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
        expiry: timedelta | float | None = None,
        deferrable: bool = DEFAULT_DEFERRABLE,
        **kwargs: Any,
    ) -> None:
        arguments = {name: value for name, value in locals().items() if name in REQUEST_ARGUMENTS}
        super().__init__(**kwargs)
        lifetime = timedelta(seconds=float(expiry)) if isinstance(expiry, int | float) else expiry
        check_cluster_arguments(spec, manifest, cluster_conn_id, ready_timeout=ready_timeout,
                                poll_interval=poll_interval, expiry=lifetime)  # fmt: skip
        for name, value in arguments.items():
            setattr(self, name, value)
        self.cluster_conn_id = cluster_conn_id
        # Kept as plain data: templates render it and the DAG serializer stores it.
        self.spec = dataclasses.asdict(spec) if isinstance(spec, RayClusterSpec) else spec
        self.namespace = namespace
        self.ready_timeout = ready_timeout
        self.poll_interval = poll_interval
        self.expiry = lifetime
        self.deferrable = deferrable

    def get_template_env(self, dag: DAG | None = None) -> jinja2.Environment:
        """The DAG's Jinja environment, then an absolute ``manifest`` path, which its loaders refuse."""
        import jinja2

        env = super().get_template_env(dag)

        def absolute(name: str) -> str | None:
            path = Path(name)
            return path.read_text(encoding="utf-8") if path.is_absolute() and path.is_file() else None

        root = jinja2.FunctionLoader(absolute)
        return env.overlay(loader=jinja2.ChoiceLoader([env.loader, root] if env.loader else [root]))

    def _request(self) -> ClusterRequest:
        """The cluster's request; its expiry: ``expiry``, else the DAG's run timeout, else the request's."""
        run_timeout = getattr(self.dag, "dagrun_timeout", None) if self.has_dag() else None
        if not (isinstance(run_timeout, timedelta) and run_timeout > timedelta(0)):
            run_timeout = ClusterRequest.expiry
        return ClusterRequest.from_arguments(
            spec=self.spec, namespace=self.namespace, expiry=self.expiry or run_timeout,
            **{name: getattr(self, name) for name in REQUEST_ARGUMENTS},
        )  # fmt: skip

    def execute(self, context: Context) -> dict[str, Any]:
        """Create (or reuse) the cluster, wait until it is ready (here or deferred), return its handle."""
        with closing(backend_for_connection(self.cluster_conn_id, namespace=self.namespace)) as backend:
            plan = backend.plan(self._request(), task_identity(context))  # no API call yet
            backend.ensure(plan)
            if not (self.deferrable and backend.can_defer):
                return self._finish(backend, plan, None)
            # a retry may find its cluster ready (or failed) already
            event = event_for(backend.check(plan), waited=0.0, timeout=self.ready_timeout)
            if event is not None:
                return self._finish(backend, plan, event)
        from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger

        trigger = RayClusterReadyTrigger.for_plan(
            backend.conn_id, plan, timeout=self.ready_timeout, poll_interval=self.poll_interval
        )
        self.defer(trigger=trigger, method_name="execute_complete",
                   timeout=timedelta(seconds=self.ready_timeout + 300))  # fmt: skip

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Finish after the trigger: return the handle, or delete the cluster and fail."""
        checked = validate_event(event)
        with closing(backend_for_connection(self.cluster_conn_id, namespace=self.namespace)) as backend:
            return self._finish(backend, backend.plan(self._request(), task_identity(context)), checked)

    def _finish(
        self, backend: ClusterBackend, plan: ClusterPlan, event: ReadinessEvent | None
    ) -> dict[str, Any]:
        """The handle of a ready cluster (``event``: the trigger's; ``None``: wait here), else delete it and
        fail."""
        try:
            handle = ready_handle(backend, plan, event) if event is not None else wait_until_ready(
                backend, plan, timeout=self.ready_timeout, poll_interval=self.poll_interval
            )  # fmt: skip
        except RayClusterNotReadyError as exc:
            try:
                backend.delete(plan, wait=True, timeout=120)
                note = " The cluster was deleted."
            except Exception as cleanup_error:  # report the readiness error; say the cleanup failed too
                note = f" Deleting it failed too ({cleanup_error}); the janitor removes it after its expiry."
            raise RayClusterNotReadyError(str(exc) + note, name=exc.name, namespace=exc.namespace,
                                          conditions=exc.conditions) from exc  # fmt: skip
        self.log.info(
            "Ray cluster %s (%s) ready; dashboard %s", handle.name, handle.backend, handle.dashboard_url
        )
        return handle.to_dict()


class DeleteRayClusterOperator(BaseOperator):
    """Delete a cluster, as a teardown task; one already gone counts as deleted. Without a handle (the
    create task pushed none) it deletes the clusters this DAG run's create tasks labelled.
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
            labels = task_identity(context).run_labels()
            with closing(backend_for_connection(self.cluster_conn_id)) as backend:
                names = backend.delete_labelled(
                    labels, wait=self.wait_for_deletion, timeout=self.delete_timeout
                )
            self.log.warning("No cluster handle was passed; deleted this run's clusters by label: %s", names)
            return {"name": None, "backend": backend.kind, "deleted": names}
        handle = RayClusterHandle.from_dict(self.cluster)  # RayInvalidInputError: bad input
        with closing(backend_for_handle(handle, conn_id=self.cluster_conn_id)) as backend:
            deleted = backend.delete(handle, wait=self.wait_for_deletion, timeout=self.delete_timeout)
        self.log.info("Ray cluster %s %s", handle.name, "deleted" if deleted else "was already gone")
        return {"name": handle.name, "backend": handle.backend, "deleted": deleted}


class AttachRayClusterOperator(BaseOperator):
    """Check a standing cluster now and push its handle, marked *not owned* (no task deletes it); one that is
    missing, not ready or not answering fails the task at once.

    :param cluster_name: a RayCluster in a ``kuberay`` connection's namespace, or a running local head.
    :param address: instead, any cluster's dashboard ``http(s)://host:port``.
    :param token_file: with ``address``: the file holding its Ray auth token (the handle names the file).
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
            handle = self._by_address(self.address, self.token_file)
        elif not isinstance(self.cluster_name, str) or not self.cluster_name.strip():
            raise RayInvalidInputError(f"cluster_name must name a running cluster, got {self.cluster_name!r}")
        else:
            with closing(backend_for_connection(self.cluster_conn_id, namespace=self.namespace)) as backend:
                handle = backend.attach(self.cluster_name.strip())
        self.log.info(
            "Attached to standing Ray cluster %s (%s); dashboard %s; it is never deleted by this DAG",
            handle.name, handle.backend, handle.dashboard_url,
        )  # fmt: skip
        return handle.to_dict()

    def _by_address(self, address: str, token_file: str | None) -> RayClusterHandle:
        """A handle to the cluster whose dashboard answers at ``address`` with the token."""
        if not isinstance(address, str) or not address.startswith(("http://", "https://")):
            raise RayInvalidInputError(f"address must be a dashboard's http(s)://host:port, got {address!r}")
        token_file = os.path.expanduser(token_file) if token_file is not None else None
        try:
            token = Path(token_file).read_text().strip() if token_file is not None else None
        except OSError as exc:
            raise RayInvalidInputError(f"token_file {token_file!r} cannot be read: {exc.strerror}") from exc
        url = address.rstrip("/")
        answered, detail = probe_dashboard(url, token)
        if not answered:
            raise RayClusterNotReadyError(
                f"the Ray dashboard at {address} does not answer: {detail}", name=address
            )
        self.log.info("The Ray dashboard at %s answers (Ray %s)", address, detail)
        name = re.sub(r"[^a-z0-9]+", "-", address.split("://", 1)[1].lower()).strip("-")
        return RayClusterHandle(
            backend="local", name=f"address-{name}", dashboard_url=url, auth_token_file=token_file,
            owned=False, extra={"address": address},
        )  # fmt: skip


def orphan_reason(ti: Any, dag_id: str, run_id: str) -> str | None:
    """Why a cluster of this DAG run is an orphan: the run is gone (``airflow tasks test`` deletes its
    temporary run) or finished (``None``: it runs, or ``ti`` cannot say)."""
    if ti is None:
        return None
    if ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
        return f"its DAG run {dag_id}/{run_id} no longer exists"
    state = str(ti.get_dagrun_state(dag_id=dag_id, run_id=run_id))
    return f"its DAG run {dag_id}/{run_id} has finished ({state})" if state in ("success", "failed") else None


class RayClusterJanitorOperator(BaseOperator):
    """Delete provider-created clusters past their expiry, local heads whose DAG run is gone or finished,
    and pools idle past their TTL (a pool's cluster goes by its leases only).

    :param list_only: only list what would be deleted (a dry run).
    :param orphans_of_finished_runs: also delete local heads whose DAG run is gone or finished.
    """

    template_fields = ("namespace",)

    def __init__(
        self,
        *,
        cluster_conn_id: str | None = None,
        namespace: str | None = None,
        list_only: bool = False,
        wait_for_deletion: bool = False,
        orphans_of_finished_runs: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster_conn_id = cluster_conn_id
        self.namespace = namespace
        self.list_only = list_only
        self.wait_for_deletion = wait_for_deletion
        self.orphans_of_finished_runs = orphans_of_finished_runs

    def execute(self, context: Context) -> list[str]:
        """Return the names of the expired clusters and idle pools (deleted unless ``list_only``)."""
        orphaned = partial(orphan_reason, context.get("ti") if self.orphans_of_finished_runs else None)
        with closing(backend_for_connection(self.cluster_conn_id, namespace=self.namespace)) as backend:
            clusters, pools = janitor_sweep(backend, self.log.info, orphaned=orphaned, dry_run=self.list_only,
                                            wait=self.wait_for_deletion)  # fmt: skip
        return clusters + pools

"""The cluster operators: create a cluster for a DAG run, delete it (teardown), attach a standing one, and
the janitor of what killed runs left behind. A local head (no connection) and a KubeRay RayCluster push
the same handle, so a DAG switches by its connection only.
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


#: A cluster's lifetime when neither ``expiry`` nor the DAG's ``dagrun_timeout`` says otherwise.
DEFAULT_EXPIRY = timedelta(hours=24)
#: DAG run states after which no task of the run needs its cluster any more.
FINISHED_RUN_STATES = ("success", "failed")


def check_cluster_arguments(
    spec: RayClusterSpec | dict[str, Any] | None,
    manifest: Any,
    cluster_conn_id: str | None,
    *,
    spec_name: str = "spec",
    **seconds: float | None,
) -> None:
    """Check a cluster's arguments when the DAG is parsed: ``spec`` or ``manifest``, positive ``seconds``
    (``None``: not given), and a spec without Jinja (one with Jinja is checked at run time), by every rule
    that does not depend on the connection (no connection: the local backend's token auth).

    :raises RayInvalidInputError: naming the bad field.
    """
    if spec is not None and manifest is not None:
        raise RayInvalidInputError(f"pass either {spec_name} or manifest, not both")
    bad = [name for name, value in seconds.items() if value is not None and value <= 0]
    if bad:
        raise RayInvalidInputError(f"{' and '.join(bad)} must be positive")
    if not isinstance(spec, RayClusterSpec) and not (isinstance(spec, dict) and is_literal(spec)):
        return  # nothing, an upstream XCom or a template: checked once it is rendered
    check_spec(spec, default_auth="auth_options" if cluster_conn_id is None else None)


class CreateRayClusterOperator(BaseOperator):
    """Provision a Ray cluster and push its handle (``RayClusterHandle.to_dict()``) to XCom.

    Ready means the head is ready (its job agent answering, as KubeRay's default head readiness probe
    checks) AND the dashboard's ``/api/version`` answers. A retry finds and reuses the cluster its earlier
    try created. A cluster not ready in ``ready_timeout`` is deleted and the task fails with its conditions.

    :param cluster_conn_id: ``None`` for a local ephemeral head, or a ``kuberay`` connection.
    :param spec: a :class:`RayClusterSpec` or a dict of its fields (head, worker_groups, image, ...).
    :param manifest: instead of ``spec``: a full RayCluster manifest (dict, YAML text or a ``.yaml`` path,
        absolute or relative to the DAG folder), sent unchanged but for its name, namespace and ownership
        labels and annotations.
    :param cluster_name: a fixed name (default: generated from dag_id, run_id, task_id and map index).
    :param dashboard_url_template: overrides how the dashboard is reached, e.g.
        ``https://{name}.ray.example.com`` (docs/operators.md).
    :param expiry: lifetime after which the janitor may delete the cluster (timedelta or seconds);
        default: the DAG's ``dagrun_timeout`` when it has one (an orphan outlives no run), else 24 h.
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
        expiry: timedelta | float | None = None,
        deferrable: bool = DEFAULT_DEFERRABLE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        lifetime = timedelta(seconds=float(expiry)) if isinstance(expiry, int | float) else expiry
        seconds = None if lifetime is None else lifetime.total_seconds()
        check_cluster_arguments(spec, manifest, cluster_conn_id, ready_timeout=ready_timeout,
                                poll_interval=poll_interval, expiry=seconds)  # fmt: skip
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
        self.expiry = lifetime
        self.deferrable = deferrable

    def get_template_env(self, dag: DAG | None = None) -> jinja2.Environment:
        """The DAG's Jinja environment (DAG folder, ``template_searchpath``), then a ``manifest`` given as an
        absolute file path, which those loaders refuse (a relative one is never looked up from ``/``)."""
        import jinja2

        env = super().get_template_env(dag)

        def absolute(name: str) -> str | None:
            path = Path(name)
            return path.read_text(encoding="utf-8") if path.is_absolute() and path.is_file() else None

        root = jinja2.FunctionLoader(absolute)
        return env.overlay(loader=jinja2.ChoiceLoader([env.loader, root] if env.loader else [root]))

    def _request(self) -> ClusterRequest:
        """The cluster's request; its expiry: ``expiry``, else the DAG's run timeout, else 24 h."""
        run_timeout = getattr(self.dag, "dagrun_timeout", None) if self.has_dag() else None
        if not (isinstance(run_timeout, timedelta) and run_timeout > timedelta(0)):
            run_timeout = DEFAULT_EXPIRY
        return ClusterRequest.from_arguments(
            spec=self.spec, local_options=self.local_options, manifest=self.manifest,
            cluster_name=self.cluster_name, name_prefix=self.name_prefix, namespace=self.namespace,
            dashboard_url_template=self.dashboard_url_template, expiry=self.expiry or run_timeout,
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
        from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger, plan_json

        trigger = RayClusterReadyTrigger(
            conn_id=backend.conn_id, plan=plan_json(plan), timeout=self.ready_timeout,
            poll_interval=self.poll_interval,
        )  # fmt: skip
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
        """The handle of a ready cluster (``event``: the trigger's, or ``None``: wait here); a cluster that is
        not ready is deleted and the task fails."""
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
    """Delete a cluster; meant as a teardown task (``.as_teardown(setups=create)``).

    Idempotent: a cluster already gone counts as deleted. Without a handle (``create.output``: the create
    task pushed none), it deletes the clusters this DAG run's create tasks labelled, through
    ``cluster_conn_id`` (which also serves a handle that names no connection).
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
    """Check a standing cluster now and push its handle, marked *not owned*: the downstream operators take
    it as ``cluster=attach.output``; ``DeleteRayClusterOperator`` and the janitor leave the cluster alone.

    By name: a RayCluster in a ``kuberay`` connection's namespace, or a running local head (its token stays
    in its Secret or file). By ``address``: any cluster's dashboard (``ray start --head``), with the file
    holding its token (``ray get-auth-token`` writes ``~/.ray/auth_token``); the handle refers to the file,
    never carries the token. A cluster that is missing, not ready or not answering fails the task at once.

    :param address: instead of ``cluster_name``, a dashboard's ``http(s)://host:port``.
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
        """A handle (never owned) to the cluster whose dashboard answers at ``address`` with the token."""
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
    """Why a cluster of this DAG run is an orphan: the run no longer exists (``airflow tasks test`` deletes
    its temporary run) or has finished (``None``: it still runs, or ``ti``, the Task SDK's, cannot say)."""
    count = getattr(ti, "get_dr_count", None)
    state_of = getattr(ti, "get_dagrun_state", None)
    if count is None or state_of is None:
        return None
    if count(dag_id=dag_id, run_ids=[run_id]) == 0:
        return f"its DAG run {dag_id}/{run_id} no longer exists"
    state = str(state_of(dag_id=dag_id, run_id=run_id))
    return f"its DAG run {dag_id}/{run_id} has finished ({state})" if state in FINISHED_RUN_STATES else None


class RayClusterJanitorOperator(BaseOperator):
    """Delete provider-created clusters whose expiry annotation has passed (orphans of killed runs), local
    heads whose DAG run no longer exists or has finished, and pools whose idle TTL is over; never a pool's
    cluster that a run holds (a pool's cluster goes by its leases, not by an expiry or a DAG run).

    :param list_only: only list what would be deleted (a dry run).
    :param orphans_of_finished_runs: also delete the clusters whose DAG run is gone or finished (local
        heads; a KubeRay namespace may serve several Airflow deployments, so there only expiry counts).
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

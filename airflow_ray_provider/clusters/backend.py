"""The cluster backend interface, and the request, task identity and plan it works with.

Creating, waiting for and deleting a Ray cluster are the same steps whatever lends the machines; only
*how* differs. :class:`ClusterBackend` is those steps. :class:`~airflow_ray_provider.clusters.local.
LocalBackend` (an ephemeral head on this machine) and :class:`~airflow_ray_provider.clusters.kuberay.
KubeRayBackend` (a RayCluster CR) implement them; the cluster operators and the readiness trigger talk to
nothing else. Which backend a connection id or a cluster handle means is decided in one place,
:mod:`airflow_ray_provider.hooks.kuberay`.

A backend also attaches to a standing cluster by name (:meth:`ClusterBackend.attach`). That handle is not
*owned*, and no delete path of any backend deletes a cluster through a handle it does not own
(:func:`keeps_unowned`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay import (
    LABEL_CREATED_BY,
    LABEL_DAG_ID,
    LABEL_RUN_HASH,
    KubeRaySpecError,
    RayClusterSpec,
    TokenRef,
    build_body,
    check_cluster_name,
    generate_name,
    ownership_labels,
    validate_spec,
)
from airflow_ray_provider.local import LocalClusterOptions

if TYPE_CHECKING:
    from airflow_ray_provider.clusters.handle import BackendName, RayClusterHandle
    from airflow_ray_provider.clusters.readiness import ReadinessCheck
    from airflow_ray_provider.jobs.client import JobClient

log = logging.getLogger(__name__)


def keeps_unowned(handle: RayClusterHandle) -> bool:
    """Whether a delete must leave this cluster alone: the handle is not owned (``owned=False``).

    Every backend's ``delete`` asks this first, so neither the teardown task nor the janitor can delete a
    standing cluster someone else runs. An attached handle is never owned, whoever created the cluster (a
    team, or this provider for another DAG): the task that attached it does not own it.
    """
    if handle.owned:
        return False
    where = f"{handle.namespace}/{handle.name}" if handle.namespace else handle.name
    log.info(
        "Not deleting Ray cluster %s: this task does not own it (it was attached, not created, here; its "
        "owner deletes it)", where,
    )  # fmt: skip
    return True


#: The name a spec is built under when only its rules are checked (no cluster of that name is made).
SPEC_CHECK_NAME = "spec-check"


def check_spec(spec: RayClusterSpec | dict[str, Any], *, default_auth: str | None = "auth_options") -> None:
    """Validate a typed spec as KubeRay would, on any backend (e.g. when a DAG is parsed).

    Its fields, then KubeRay's controller rules on the RayCluster body it builds (token auth needs
    ``ray_version`` >= 2.52, image tags agree with ``ray_version``, ...): a spec the local backend runs
    is one KubeRay accepts, so a DAG that passes locally does not fail on KubeRay.

    :param default_auth: the auth mode assumed when the spec names none (a ``kuberay`` connection's
        ``ray_auth``; ``auth_options`` by default, as on the local backend); ``None`` when the
        connection is not known yet: the auth-dependent rules are then checked when the task runs.
    :param spec: the spec, or a dict of its fields (unknown or malformed fields are refused).
    :raises RayInvalidInputError: naming the bad field and what to change.
    """
    import dataclasses

    try:
        typed = RayClusterSpec.from_dict(spec)
        validate_spec(typed)
        auth = typed.auth or default_auth or "disabled"
        build_body(dataclasses.replace(typed, auth=auth), name=SPEC_CHECK_NAME, namespace="default")
    except (KubeRaySpecError, ValueError, TypeError) as exc:
        raise RayInvalidInputError(str(exc)) from exc


@dataclass(frozen=True)
class RunCluster:
    """A provider-created cluster and the DAG run that created it.

    :param handle: its handle (for ``delete``).
    :param dag_id: the DAG that created it.
    :param run_id: the DAG run that created it.
    """

    handle: RayClusterHandle
    dag_id: str
    run_id: str


@dataclass(frozen=True)
class TaskIdentity:
    """Who asks for the cluster; its name and ownership labels derive from it (not from the try number).

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the create task.
    :param map_index: the task's map index (``-1``: not mapped).
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def labels(self) -> dict[str, str]:
        """Ownership labels of this task's cluster."""
        return ownership_labels(dag_id=self.dag_id, run_id=self.run_id, task_id=self.task_id)

    def run_labels(self) -> dict[str, str]:
        """Labels shared by every cluster of this DAG run (what a teardown without a handle deletes)."""
        labels = self.labels()
        return {k: labels[k] for k in (LABEL_CREATED_BY, LABEL_DAG_ID, LABEL_RUN_HASH)}


@dataclass(frozen=True)
class ClusterRequest:
    """What the create operator was asked for (templates rendered); the same for every backend.

    :param spec: the cluster to provision (drives KubeRay; summarised by the local backend).
    :param manifest: instead of ``spec``, a full RayCluster manifest (KubeRay only).
    :param cluster_name: a fixed name (default: generated from the task identity).
    :param name_prefix: prefix of generated names.
    :param namespace: overrides the connection's namespace (KubeRay).
    :param dashboard_url_template: overrides how the dashboard is reached (KubeRay).
    :param local_options: options of the local backend.
    :param expiry: lifetime after which the janitor may delete the cluster.
    """

    spec: RayClusterSpec | None = None
    manifest: dict[str, Any] | str | None = None
    cluster_name: str | None = None
    name_prefix: str = "ray"
    namespace: str | None = None
    dashboard_url_template: str | None = None
    local_options: LocalClusterOptions = field(default_factory=LocalClusterOptions)
    expiry: timedelta = timedelta(hours=24)

    @classmethod
    def from_arguments(
        cls,
        *,
        spec: RayClusterSpec | dict[str, Any] | None,
        local_options: LocalClusterOptions | dict[str, Any] | None,
        **fields: Any,
    ) -> ClusterRequest:
        """Build a request from operator arguments, parsing the plain-data ``spec`` and ``local_options``.

        :raises RayInvalidInputError: for unknown or malformed fields.
        """
        try:
            parsed = RayClusterSpec.from_dict(spec) if spec is not None else None
            options = LocalClusterOptions.from_value(local_options)
        except (KubeRaySpecError, ValueError, TypeError) as exc:
            raise RayInvalidInputError(str(exc)) from exc
        return cls(spec=parsed, local_options=options, **fields)

    def name_for(self, identity: TaskIdentity) -> str:
        """The cluster name: explicit, or generated from the task identity.

        Every backend takes only names KubeRay accepts, so a DAG that runs locally runs on KubeRay too
        (and a local head's name never escapes its registry folder).

        :raises RayInvalidInputError: for a name KubeRay would reject.
        """
        try:
            if self.cluster_name:
                check_cluster_name(self.cluster_name)
                return self.cluster_name
            return generate_name(
                prefix=self.name_prefix, dag_id=identity.dag_id, run_id=identity.run_id,
                task_id=identity.task_id, map_index=identity.map_index,
            )  # fmt: skip
        except KubeRaySpecError as exc:
            raise RayInvalidInputError(str(exc)) from exc


@dataclass(frozen=True)
class ClusterPlan:
    """A validated request: the cluster to create and how to reach it, fixed before any API call.

    These fields are all a readiness check needs (the trigger rebuilds a plan from them); a backend's
    own plan type adds what creating the cluster takes.

    :param name: the cluster's name (the same for every try of the task instance).
    :param namespace: its Kubernetes namespace (``None`` for the local backend).
    :param labels: its ownership labels.
    :param dashboard_url_template: how to reach the dashboard (KubeRay; ``None``: in-cluster DNS).
    :param token_ref: the Secret holding the Ray auth token (KubeRay; ``None``: no auth, or local).
    """

    name: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    dashboard_url_template: str | None = None
    token_ref: TokenRef | None = None


@runtime_checkable
class ClusterBackend(Protocol):
    """Create, wait for and delete Ray clusters of one kind; every step the cluster operators take.

    A run that creates a cluster calls :meth:`plan` (all validation, no API call), :meth:`ensure`, then
    :meth:`check` until it is ready (:func:`airflow_ray_provider.launch.wait_until_ready`, or a trigger
    when :attr:`can_defer`), and :meth:`handle`; on any failure, :meth:`delete` with the plan. Teardown
    and janitor tasks call :meth:`delete`, :meth:`delete_labelled` and :meth:`expired`.
    """

    @property
    def kind(self) -> BackendName:
        """The ``backend`` the handles of this backend carry."""
        ...

    @property
    def conn_id(self) -> str | None:
        """The cluster connection this backend was built from (``None``: the local backend)."""
        ...

    @property
    def can_defer(self) -> bool:
        """Whether waiting can move to the triggerer (else it happens in the task)."""
        ...

    def plan(self, request: ClusterRequest, identity: TaskIdentity) -> ClusterPlan:
        """Validate the request and fix the cluster's name and body; no API call.

        :raises RayInvalidInputError: naming the bad field.
        """
        ...

    def ensure(self, plan: ClusterPlan) -> bool:
        """Create the cluster, or reuse the one an earlier try of this task created.

        :returns: ``True`` when created now, ``False`` when reused.
        :raises RayClusterError: when the name belongs to a cluster this task did not create.
        """
        ...

    def check(self, plan: ClusterPlan) -> ReadinessCheck:
        """Look once: head ready and dashboard answering (blocking I/O; triggers run it in a thread)."""
        ...

    def handle(self, plan: ClusterPlan, dashboard_url: str) -> RayClusterHandle:
        """The handle (XCom) of a ready cluster."""
        ...

    def token(self, handle: RayClusterHandle) -> str | None:
        """The token a handle refers to (a local head's file, a KubeRay Secret); ``None``: no token auth."""
        ...

    def job_client(self, handle: RayClusterHandle, **options: Any) -> JobClient:
        """The Job API client of one of these clusters, with its token (``options``: the client's)."""
        from airflow_ray_provider.jobs.client import JobClient

        source = f"cluster {handle.name} ({handle.backend})"
        return JobClient(handle.dashboard_url, token=self.token(handle), source=source, **options)

    def delete(self, cluster: RayClusterHandle | ClusterPlan, *, wait: bool, timeout: float) -> bool:
        """Delete a cluster (and what the provider created with it), by its handle or, while it is still
        starting, by its plan; ``False`` if it was already gone.

        A handle that is not owned (:func:`keeps_unowned`) is never deleted: ``False``.
        """
        ...

    def attach(self, name: str) -> RayClusterHandle:
        """A handle (``owned=False``) to a standing cluster that is running now; no waiting.

        :raises RayInvalidInputError: when no cluster has this name.
        :raises RayClusterNotReadyError: when it is not ready or its dashboard does not answer, with the
            cluster's conditions.
        """
        ...

    def delete_labelled(self, labels: Mapping[str, str], *, wait: bool, timeout: float) -> list[str]:
        """Delete every provider cluster whose labels include ``labels``; returns their names."""
        ...

    def expired(self, now: datetime | None = None) -> list[RayClusterHandle]:
        """Provider-created clusters whose expiry has passed (handles for :meth:`delete`)."""
        ...

    def owned_runs(self) -> list[RunCluster]:
        """Provider-created clusters with the DAG run that created them, for the janitor to check that run."""
        ...

    def close(self) -> None:
        """Release clients (connections, thread pools); the backend is not used afterwards."""
        ...

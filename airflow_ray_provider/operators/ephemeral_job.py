"""``EphemeralRayJobOperator``: cluster and job in one task (create, run, delete).

It is :class:`SubmitRayJobOperator` (same submission ids, re-attach table, waiting, log streaming,
deferral, timeouts and errors) wrapped in the lifecycle of a cluster of its own, through the same
:class:`~airflow_ray_provider.clusters.ClusterBackend` as ``CreateRayClusterOperator``: a local ephemeral
head by default, a KubeRay RayCluster through a ``kuberay`` connection. The cluster is deleted in the
same task whatever happens: success, failure, ``job_timeout``, ``execution_timeout``, a trigger timeout,
a kill (``on_kill``, or the trigger's when the task was deferred). A retry re-attaches: the cluster's name
and the job's submission id both come from the task instance, never the try number.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import TaskDeferred

from airflow_ray_provider.clusters import (
    EVENT_ERROR,
    EVENT_READY,
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    LocalClusterOptions,
    RayClusterHandle,
    RayClusterSpec,
    make_event,
)
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.hooks.cluster_backend import backend_for_connection
from airflow_ray_provider.operators.ray_cluster import check_spec_when_parsed, task_identity
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger


class EphemeralRayJobOperator(SubmitRayJobOperator):
    """Create a cluster, run one Ray job on it, delete the cluster: all in this task.

    Takes every argument of :class:`SubmitRayJobOperator` except ``cluster``, ``ray_conn_id`` and
    ``wait_for_completion`` (the cluster exists only while this task waits). XCom: the job's result.

    :param cluster_conn_id: ``None`` for a local ephemeral head, or a ``kuberay`` connection.
    :param cluster_spec: the cluster (:class:`RayClusterSpec` or a dict of its fields).
    :param manifest: instead, a full RayCluster manifest (KubeRay).
    :param namespace: overrides the connection's namespace.
    :param local_options: options of the local backend.
    :param name_prefix: prefix of the cluster's generated name.
    :param ready_timeout: seconds to wait for the cluster.
    :param delete_timeout: seconds to wait for the cluster to be gone.
    :param expiry: after this the janitor may delete the cluster (if a killed worker left it behind).
    """

    template_fields = (  # type: ignore[assignment]  # the base's tuple, longer
        *SubmitRayJobOperator.template_fields,
        "cluster_spec",
        "manifest",
        "namespace",
    )
    template_fields_renderers = {**SubmitRayJobOperator.template_fields_renderers, "cluster_spec": "json"}
    ui_color = "#d6e9f0"

    def __init__(
        self,
        *,
        cluster_conn_id: str | None = None,
        cluster_spec: RayClusterSpec | dict[str, Any] | None = None,
        manifest: dict[str, Any] | str | None = None,
        namespace: str | None = None,
        local_options: LocalClusterOptions | dict[str, Any] | None = None,
        name_prefix: str = "ray",
        ready_timeout: float = 900.0,
        delete_timeout: float = 300.0,
        expiry: timedelta = timedelta(hours=24),
        **kwargs: Any,
    ) -> None:
        if kwargs.get("cluster") is not None or kwargs.get("ray_conn_id"):
            raise RayInvalidInputError(
                "EphemeralRayJobOperator creates its own cluster: drop cluster / ray_conn_id (use "
                "SubmitRayJobOperator to run on an existing cluster)"
            )
        if kwargs.get("wait_for_completion") is False:
            raise RayInvalidInputError("wait_for_completion=False would delete the cluster under the job")
        if cluster_spec is not None and manifest is not None:
            raise RayInvalidInputError("pass either cluster_spec or manifest, not both")
        if ready_timeout <= 0 or delete_timeout <= 0:
            raise RayInvalidInputError("ready_timeout and delete_timeout must be positive")
        check_spec_when_parsed(cluster_spec, cluster_conn_id)
        super().__init__(**kwargs)
        self.cluster_conn_id = cluster_conn_id
        self.cluster_spec = cluster_spec
        self.manifest = manifest
        self.namespace = namespace
        self.local_options = local_options
        self.name_prefix = name_prefix
        self.ready_timeout = ready_timeout
        self.delete_timeout = delete_timeout
        self.expiry = expiry

    def _cluster_plan(self, context: Context) -> tuple[ClusterBackend, ClusterPlan]:
        """The backend and the cluster's plan: every check, no API call."""
        request = ClusterRequest.from_arguments(
            spec=self.cluster_spec, local_options=self.local_options, manifest=self.manifest,
            name_prefix=self.name_prefix, namespace=self.namespace, expiry=self.expiry,
        )  # fmt: skip
        backend = backend_for_connection(self.cluster_conn_id, namespace=self.namespace)
        return backend, backend.plan(request, task_identity(context))

    def execute(self, context: Context) -> dict[str, str]:
        """Check everything, start (or re-attach to) the cluster, run the job, delete the cluster."""
        self.job_spec(context)  # bad job arguments fail before any cluster exists
        backend, plan = self._cluster_plan(context)
        self._cleanup = (backend, plan)
        deferred = False
        try:
            backend.ensure(plan)
            event = backend.wait(plan, timeout=self.ready_timeout, poll_interval=min(self.poll_interval, 5.0))
            if event["status"] != EVENT_READY or not event["dashboard_url"]:
                backend.fail(plan, event)  # deletes the cluster and raises with its conditions
            self.cluster = backend.handle(plan, event["dashboard_url"]).to_dict()
            self.log.info("Ray cluster %s ready for this task's job", plan.name)
            return super().execute(context)
        except TaskDeferred:
            deferred = True  # the cluster stays for the trigger; resume_execution deletes it
            raise
        finally:
            if not deferred:
                self._delete_cluster(backend, plan)
                backend.close()

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | int | float | None = None,
    ) -> NoReturn:
        """Defer as :class:`SubmitRayJobOperator` does; the trigger also deletes the cluster on kill."""
        if isinstance(trigger, RayJobTrigger):
            from airflow_ray_provider.triggers.ephemeral_job import EphemeralClusterJobTrigger

            _, arguments = trigger.serialize()
            trigger = EphemeralClusterJobTrigger(cluster_conn_id=self.cluster_conn_id, **arguments)
        super().defer(trigger=trigger, method_name=method_name, kwargs=kwargs, timeout=timeout)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """After the trigger (or its timeout): finish the job as usual, then delete the cluster."""
        backend, plan = self._cluster_plan(context)
        try:
            check = backend.check(plan)
            if check.verdict != "ready" or not check.dashboard_url:
                raise RayClusterNotReadyError(
                    f"the Ray cluster {plan.name} of this task stopped while the job ran: {check.message}",
                    name=plan.name, namespace=plan.namespace,
                )  # fmt: skip
            self.cluster = backend.handle(plan, check.dashboard_url).to_dict()
            return super().resume_execution(next_method, next_kwargs, context)
        finally:
            self._delete_cluster(backend, plan)
            backend.close()

    def _delete_cluster(self, backend: ClusterBackend, plan: ClusterPlan) -> None:
        """Delete this task's cluster; a failed delete fails the task only when nothing else did."""
        failing = sys.exc_info()[1] is not None
        try:
            if self.cluster:
                handle = RayClusterHandle.from_dict(self.cluster)
                deleted = backend.delete(handle, wait=True, timeout=self.delete_timeout)
                self.log.info("Deleted this task's Ray cluster %s (existed: %s)", plan.name, deleted)
            else:  # it never became usable: ``fail`` deletes whatever ``ensure`` made, then raises
                with contextlib.suppress(RayClusterNotReadyError):
                    backend.fail(plan, make_event(EVENT_ERROR, message=f"cluster {plan.name} was not used"))
        except Exception as exc:
            self.log.error(
                "Deleting Ray cluster %s failed: %s (the janitor removes it after expiry)", plan.name, exc
            )
            if not failing:
                raise

    def on_kill(self) -> None:
        """Stop the job (``stop_on_kill``), then delete the cluster."""
        try:
            super().on_kill()
        finally:
            cleanup = getattr(self, "_cleanup", None)
            if cleanup is not None:
                self._delete_cluster(*cleanup)

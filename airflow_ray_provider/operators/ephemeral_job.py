"""``EphemeralRayJobOperator``: cluster and job in one task (create, run, delete).

It is :class:`SubmitRayJobOperator` (same submission ids, re-attach table, waiting, log streaming,
deferral, timeouts and errors) wrapped in the lifecycle of a cluster of its own, through the same
:class:`~airflow_ray_provider.clusters.ClusterBackend` as ``CreateRayClusterOperator``: a local ephemeral
head by default, a KubeRay RayCluster through a ``kuberay`` connection. The cluster is deleted in the
same task as the cleanup table says (docs/launch.md; the default ``cleanup="always"`` deletes it whatever
happens: success, failure, ``job_timeout``, ``execution_timeout``, a trigger timeout, a kill, ``on_kill`` or
the trigger's when the task was deferred). A retry re-attaches: the cluster's name and the job's
submission id both come from the task instance, never the try number.

It composes rather than overrides: the job part is :class:`SubmitRayJobOperator`'s, told through
:attr:`~SubmitRayJobOperator.owned_cluster_conn` that the cluster is its own (so its trigger deletes the
cluster on a user's kill); the cluster part is one :class:`OwnedClusterLifecycle` with one delete path.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

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
from airflow_ray_provider.launch import Cleanup, Ending, actions_for
from airflow_ray_provider.operators.ray_cluster import check_spec_when_parsed, task_identity
from airflow_ray_provider.operators.ray_job import OwnedCluster, SubmitRayJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


@dataclass
class OwnedClusterLifecycle:
    """The cluster of one task: made ready, then deleted once (whichever path ends the task first).

    :param backend: its backend.
    :param plan: its plan (name, namespace, labels).
    :param delete_timeout: seconds to wait for it to be gone.
    :param handle: its handle once it answers.
    """

    backend: ClusterBackend
    plan: ClusterPlan
    delete_timeout: float
    handle: RayClusterHandle | None = None
    done: bool = False

    def ready(self, *, timeout: float, poll_interval: float) -> RayClusterHandle:
        """Create (or re-attach to) the cluster and wait until its dashboard answers."""
        self.backend.ensure(self.plan)
        event = self.backend.wait(self.plan, timeout=timeout, poll_interval=poll_interval)
        if event["status"] != EVENT_READY or not event["dashboard_url"]:
            self.done = True
            self.backend.fail(self.plan, event)  # deletes the cluster and raises with its conditions
        self.handle = self.backend.handle(self.plan, event["dashboard_url"])
        return self.handle

    def still_ready(self) -> RayClusterHandle:
        """The handle of a cluster that must still be up (after a deferral)."""
        check = self.backend.check(self.plan)
        if check.verdict != "ready" or not check.dashboard_url:
            raise RayClusterNotReadyError(
                f"the Ray cluster {self.plan.name} of this task stopped while the job ran: {check.message}",
                name=self.plan.name,
                namespace=self.plan.namespace,
            )
        self.handle = self.backend.handle(self.plan, check.dashboard_url)
        return self.handle

    def end(self, delete: bool, log: logging.Logger | Any) -> bool:
        """Delete the cluster when ``delete`` (the cleanup table's answer); a failed delete fails the task
        only when nothing else did. Then release the backend.

        :returns: whether this call deleted a cluster that had answered (its teardown can be measured).
        """
        failing = sys.exc_info()[1] is not None
        deleted = False
        try:
            if delete and not self.done:
                self.done = True
                deleted = self.handle is not None
                self._delete(log)
            elif not delete:
                log.info(
                    "Keeping Ray cluster %s (cleanup); the janitor deletes it after expiry", self.plan.name
                )
        except Exception as exc:
            log.error(
                "Deleting Ray cluster %s failed: %s (the janitor removes it after expiry)",
                self.plan.name,
                exc,
            )
            if not failing:
                raise
            deleted = False
        finally:
            self.backend.close()
        return deleted

    def _delete(self, log: logging.Logger | Any) -> None:
        if self.handle is not None:
            deleted = self.backend.delete(self.handle, wait=True, timeout=self.delete_timeout)
            log.info("Deleted this task's Ray cluster %s (existed: %s)", self.plan.name, deleted)
            return
        # It never answered: ``fail`` deletes whatever ``ensure`` made, then raises (expected here).
        with contextlib.suppress(RayClusterNotReadyError):
            self.backend.fail(
                self.plan, make_event(EVENT_ERROR, message=f"cluster {self.plan.name} was not used")
            )


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
    default_cleanup: ClassVar[Cleanup] = Cleanup.ALWAYS
    usage_mode: ClassVar[str | None] = "one_task"

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
        self._owned: OwnedClusterLifecycle | None = None

    def _lifecycle(self, context: Context) -> OwnedClusterLifecycle:
        """The cluster's lifecycle: every check, no API call."""
        request = ClusterRequest.from_arguments(
            spec=self.cluster_spec,
            local_options=self.local_options,
            manifest=self.manifest,
            name_prefix=self.name_prefix,
            namespace=self.namespace,
            expiry=self.expiry,
        )
        backend = backend_for_connection(self.cluster_conn_id, namespace=self.namespace)
        plan = backend.plan(request, task_identity(context))
        return OwnedClusterLifecycle(backend, plan, self.delete_timeout)

    def _deletes(self, ending: Ending) -> bool:
        return actions_for(self.cleanup, ending).delete_cluster

    def execute(self, context: Context) -> dict[str, str]:
        """Check everything, start (or re-attach to) the cluster, run the job, delete the cluster."""
        self.job_spec(context)  # bad job arguments fail before any cluster exists
        lifecycle = self._owned = self._lifecycle(context)
        deferred, ending = False, Ending.FAILED
        try:
            started = time.time()
            handle = lifecycle.ready(timeout=self.ready_timeout, poll_interval=min(self.poll_interval, 5.0))
            self.cluster_times = (started, time.time())
            self.cluster = handle.to_dict()
            self.owned_cluster_conn = OwnedCluster(self.cluster_conn_id)
            self.log.info("Ray cluster %s ready for this task's job", lifecycle.plan.name)
            result = super().execute(context)
            ending = Ending.SUCCEEDED
            return result
        except TaskDeferred:
            deferred = True  # the cluster stays for the trigger; resume_execution ends it
            raise
        finally:
            if not deferred:
                self._end_cluster(lifecycle, ending)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """After the trigger (or its timeout): finish the job as usual, then end the cluster."""
        lifecycle = self._owned = self._lifecycle(context)
        ending = Ending.FAILED
        try:
            self.cluster = lifecycle.still_ready().to_dict()
            self.owned_cluster_conn = OwnedCluster(self.cluster_conn_id)
            result = super().resume_execution(next_method, next_kwargs, context)
            ending = Ending.SUCCEEDED
            return result
        finally:
            self._end_cluster(lifecycle, ending)

    def on_kill(self) -> None:
        """A SIGTERM: the job and the cluster as the cleanup table says for a worker's SIGTERM."""
        try:
            super().on_kill()
        finally:
            if self._owned is not None:
                self._end_cluster(self._owned, Ending.WORKER_SIGTERM)

    def _end_cluster(self, lifecycle: OwnedClusterLifecycle, ending: Ending) -> None:
        """End the cluster as the cleanup table says; once deleted, its teardown goes into the record."""
        if lifecycle.end(self._deletes(ending), self.log):
            self.record_teardown()

"""``EphemeralRayJobOperator``: cluster and job in one task (create, run, delete).

It is :class:`~airflow_ray_provider.operators.ray_job.SubmitRayJobOperator` on a cluster of the run's own:
the run's target creates it through the same :class:`~airflow_ray_provider.clusters.ClusterBackend` as
``CreateRayClusterOperator`` (a local ephemeral head by default, a KubeRay RayCluster through a ``kuberay``
connection), and the run deletes it as the cleanup table says (the default ``cleanup="always"`` deletes
it whatever happens: success, failure, ``job_timeout``, ``execution_timeout``, a kill, also while it
starts; after a deferral, ``execute_complete`` deletes it, or the trigger on a user's kill). A retry
re-attaches: the cluster's name and the job's submission id both come from the task instance.

With ``cluster_pool={"name": ..., "idle_ttl": ...}`` (``pool`` is Airflow's own slot pool) the cluster is
the pool's instead, shared with every task (and laptop run) that names the pool with the same spec: the
task leases it, renews the lease while it waits (in the triggerer too, when deferred) and releases it at
its end; ``cleanup`` then acts on the job only, and the cluster stays ``idle_ttl`` seconds after its last
lease (:mod:`airflow_ray_provider.launch.pool`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_ray_provider.clusters import LocalClusterOptions, PoolOptions, RayClusterSpec
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.ray_job import own_cluster_target
from airflow_ray_provider.launch import Cleanup, pool_options
from airflow_ray_provider.operators.base import task_identity
from airflow_ray_provider.operators.ray_cluster import check_cluster_arguments
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import RunTarget


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
    :param cluster_pool: run on this pool's cluster of this spec instead (``PoolOptions`` or its fields:
        ``name``, ``idle_ttl``, ``lease_ttl``, ``replace``), shared with other tasks; never deleted by
        this task's cleanup.
    """

    template_fields = (  # type: ignore[assignment]  # the base's tuple, longer
        *SubmitRayJobOperator.template_fields, "cluster_spec", "manifest", "namespace",
    )  # fmt: skip
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
        cluster_pool: PoolOptions | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("cluster") is not None or kwargs.get("ray_conn_id"):
            raise RayInvalidInputError(
                "EphemeralRayJobOperator creates its own cluster: drop cluster / ray_conn_id (use "
                "SubmitRayJobOperator to run on an existing cluster)"
            )
        if kwargs.get("wait_for_completion") is False:
            raise RayInvalidInputError("wait_for_completion=False would delete the cluster under the job")
        check_cluster_arguments(cluster_spec, manifest, cluster_conn_id, spec_name="cluster_spec",
                                ready_timeout=ready_timeout, delete_timeout=delete_timeout)  # fmt: skip
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
        self.cluster_pool = pool_options(cluster_pool, self.poll_interval)

    def target(self, context: Context) -> RunTarget:
        """A cluster of the run's own (or the pool's): every check here, no API call (the run creates it)."""
        return own_cluster_target(
            task_identity(context), cluster_conn_id=self.cluster_conn_id, cluster_spec=self.cluster_spec,
            local_options=self.local_options, manifest=self.manifest, namespace=self.namespace,
            pool=self.cluster_pool, name_prefix=self.name_prefix, expiry=self.expiry,
            ready_timeout=self.ready_timeout, delete_timeout=self.delete_timeout,
            retry_attempts=self.retry_attempts,
        )  # fmt: skip

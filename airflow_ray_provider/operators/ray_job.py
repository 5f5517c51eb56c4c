"""Ray jobs through the Job API: on a given cluster (``SubmitRayJobOperator``) or on one of the task's own
(``EphemeralRayJobOperator``); a retried task re-attaches to its job (the submission-id rule).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow_ray_provider.clusters import LocalClusterOptions, RayClusterSpec
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.ray_job import check_target_arguments, job_api_target, own_cluster_target
from airflow_ray_provider.launch import Cleanup, PoolOptions, pool_options
from airflow_ray_provider.operators.base import RunOperator, is_template, rendered_number, task_identity
from airflow_ray_provider.operators.ray_cluster import check_cluster_arguments

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import RunTarget


#: ``EphemeralRayJobOperator``'s arguments that go to its cluster as they are.
CLUSTER_ARGUMENTS = ("cluster_conn_id", "cluster_spec", "manifest", "namespace", "local_options",
                     "name_prefix", "ready_timeout", "delete_timeout", "expiry")  # fmt: skip


class SubmitRayJobOperator(RunOperator):
    """Submit a Ray job and (optionally) wait for it, streaming its log into the task log; every argument
    of :class:`~airflow_ray_provider.operators.base.RunOperator` too.

    :param cluster: a cluster handle, e.g. ``create_cluster.output`` (or ``ray_conn_id``, default
        ``ray_default``; a connection whose extra names a ``pool`` runs the job on the pool's cluster).
    :param job_timeout: seconds (or timedelta) from the job's start; then the task fails and the job is
        stopped (unless ``cleanup="never"``).
    :param retry_attempts: attempts per Job API call on transient failures.
    """

    template_fields = (
        "entrypoint", "runtime_env", "metadata", "cluster", "ray_conn_id", "entrypoint_resources",
        "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "job_timeout", "artifact_uri",
    )  # fmt: skip
    template_fields_renderers = {"runtime_env": "json", "metadata": "json", "cluster": "json"}
    ui_color = "#d6e9ff"
    templated_numbers: ClassVar[dict[str, str]] = {
        **RunOperator.templated_numbers,
        "entrypoint_memory": "int",
        "job_timeout": "seconds",
    }

    def __init__(
        self,
        *,
        cluster: Any = None,
        ray_conn_id: str | None = None,
        entrypoint_memory: int | None = None,
        wait_for_completion: bool = True,
        job_timeout: float | timedelta | None = None,
        retry_attempts: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_target_arguments(cluster, ray_conn_id)
        self.cluster = cluster
        self.ray_conn_id = ray_conn_id
        self.entrypoint_memory = entrypoint_memory
        self.wait_for_completion = wait_for_completion
        # a Jinja string stays one until rendered; render_template_fields makes it seconds
        if not is_template(job_timeout):
            job_timeout = rendered_number(job_timeout, "job_timeout", "seconds")
        self.job_timeout = cast("float | None", job_timeout)
        self.retry_attempts = retry_attempts
        self.check_literals()

    def target(self, context: Context) -> RunTarget:
        """The cluster handle's Job API, or the ``ray`` connection's (or its pool's cluster, leased)."""
        target = job_api_target(
            self.cluster, self.ray_conn_id, identity=task_identity(context),
            poll_interval=self.poll_interval, retry_attempts=self.retry_attempts,
        )  # fmt: skip
        if target.pool is not None and not self.wait_for_completion:
            target.close()
            raise RayInvalidInputError(
                "wait_for_completion=False: a pool's lease ends with the task, so its cluster could be "
                "deleted under the job; wait for it, or use a standing cluster's connection"
            )
        return target


class EphemeralRayJobOperator(SubmitRayJobOperator):
    """Create a cluster, run one Ray job on it, delete the cluster as ``cleanup`` says (default ``always``):
    all in this task, which a retry re-attaches to. Every argument of :class:`SubmitRayJobOperator` but
    ``cluster``, ``ray_conn_id`` and ``wait_for_completion``.

    :param cluster_conn_id: ``None`` for a local ephemeral head, or a ``kuberay`` connection.
    :param cluster_spec: the cluster (:class:`RayClusterSpec` or a dict of its fields), or ``manifest``.
    :param cluster_pool: run on this pool's cluster of this spec instead (``PoolOptions`` or its fields),
        leased while the task waits; ``cleanup`` acts on the job only (docs/launch.md, "Pools").
    """

    template_fields = (  # type: ignore[assignment]  # the base's tuple, longer
        *SubmitRayJobOperator.template_fields, "cluster_spec", "manifest", "namespace",
    )  # fmt: skip
    template_fields_renderers = {**SubmitRayJobOperator.template_fields_renderers, "cluster_spec": "json"}
    ui_color = "#d6e9f0"
    default_cleanup: ClassVar[Cleanup] = Cleanup.ALWAYS

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
        arguments = {name: value for name, value in locals().items() if name in CLUSTER_ARGUMENTS}
        super().__init__(**kwargs)
        for name, value in arguments.items():
            setattr(self, name, value)
        self.cluster_pool = pool_options(cluster_pool, self.poll_interval)

    def target(self, context: Context) -> RunTarget:
        """A cluster of the run's own (or the pool's): every check, no API call."""
        arguments = {name: getattr(self, name) for name in CLUSTER_ARGUMENTS}
        return own_cluster_target(task_identity(context), pool=self.cluster_pool,
                                  retry_attempts=self.retry_attempts, **arguments)  # fmt: skip

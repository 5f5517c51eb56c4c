"""``SubmitRayJobOperator``: submit a Ray job through the Job API and wait for it well.

Re-attach, never duplicate: the submission id is deterministic per task instance, so a retried or
restarted task waits on its live job, succeeds with its succeeded job, or submits a new attempt only
after a failed or stopped one (the rule is in :mod:`airflow_ray_provider.jobs.submission`). The run itself
is :class:`~airflow_ray_provider.launch.JobRun`'s (:mod:`.base`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.ray_job import check_target_arguments, job_api_target
from airflow_ray_provider.operators.base import RunOperator, is_template, rendered_number, task_identity

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import RunTarget, UsageOptions


#: Why a mode's record has no ``teardown_s`` (the one-task operator and a RayJob measure it).
TEARDOWN_NOTES = {
    "ephemeral": "the run's teardown task (delete_cluster) deletes the cluster after this record",
    "standing": "a standing cluster is never deleted by the provider",
    "one_task": "the task kept its cluster (cleanup), or deleting it failed",
    "pool": "a pool's cluster stays for its idle TTL after its last lease",
}


class SubmitRayJobOperator(RunOperator):
    """Submit a Ray job and (optionally) wait for it, streaming its log into the task log.

    XCom (return value): ``{"submission_id", "status", "dashboard_url", "job_url"}``. Every argument of
    :class:`~airflow_ray_provider.operators.base.RunOperator` (``entrypoint``, ``runtime_env`` with
    ``working_dir`` uploaded from a local folder, ``metadata``, ``entrypoint_num_cpus``, ``cleanup``,
    ``deferrable``, ``poll_interval``, ``stream_logs``, ``prices``, ``artifact_uri``, lineage) too.

    :param cluster: a cluster handle, e.g. ``create_cluster.output`` (or use ``ray_conn_id``).
    :param ray_conn_id: a ``ray`` connection (default ``ray_default`` when no cluster is given); one whose
        extra names a ``pool`` runs the job on the pool's shared cluster (docs/operators.md).
    :param entrypoint_memory: bytes reserved for the entrypoint.
    :param wait_for_completion: wait for the job; ``False`` returns once it is submitted.
    :param job_timeout: seconds (or timedelta) from the job's start; on expiry the task fails and the
        job is stopped (unless ``cleanup="never"``).
    :param retry_attempts: attempts per Job API call on transient failures.
    """

    template_fields = (
        "entrypoint", "runtime_env", "metadata", "cluster", "ray_conn_id", "entrypoint_resources",
        "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "job_timeout", "artifact_uri",
    )  # fmt: skip
    template_fields_renderers = {"runtime_env": "json", "metadata": "json", "cluster": "json"}
    ui_color = "#d6e9ff"
    #: The usage record's ``mode``; ``None``: ``ephemeral`` on a cluster a DAG task made, else ``standing``.
    usage_mode: ClassVar[str | None] = None
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
        """The cluster handle's Job API, or the ``ray`` connection's (a pool's cluster, leased for this task
        instance, when the connection names a pool)."""
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

    def usage(self, target: RunTarget) -> UsageOptions | None:
        """The record's mode, cluster and prices: a cluster a DAG task created is ``ephemeral``, a pool's
        cluster is shared (``pool``), not the task's own."""
        handle, plan = getattr(target, "handle", None), getattr(target, "plan", None)
        pooled = getattr(target, "pool", None) is not None
        own = not pooled and (bool(handle and handle.owned) or target.owned)
        ref = target.ref()
        name = handle.name if handle else plan.name if plan else str(ref.get("ray_conn_id"))
        mode = "pool" if pooled else self.usage_mode or ("ephemeral" if own else "standing")
        note = "pool" if pooled else "one_task" if target.owned else "ephemeral" if own else "standing"
        conn_id = ref.get("ray_conn_id") or (handle.conn_id if handle else None)
        return self.usage_options(conn_id, mode=mode, cluster=name, own_cluster=own,
                                  teardown_note=TEARDOWN_NOTES[note])  # fmt: skip

"""``KubeRayJobOperator``: a KubeRay ``RayJob``, so Kubernetes itself enforces cleanup and deadlines
(nothing depends on the Airflow worker staying alive); a retry re-attaches to its task instance's RayJob.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_ray_provider.clusters import ClusterRequest, RayClusterHandle, RayClusterSpec, RayJobOptions
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import rayjobs_for_connection
from airflow_ray_provider.launch import Cleanup, RayJobTarget, check_options, plan_rayjob
from airflow_ray_provider.launch.usage import HEAD_GROUP, Prices, check_against_cluster
from airflow_ray_provider.operators.base import RunOperator, base_id, connection_prices, task_identity

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import RunTarget

#: The :class:`RayJobOptions` fields that are the operator's arguments as they are.
_OPTIONS = tuple(
    f.name
    for f in dataclasses.fields(RayJobOptions)
    if f.name not in ("entrypoint", "job_id", "runtime_env", "metadata")
)
#: The operator's arguments that go to :func:`~airflow_ray_provider.launch.plan_rayjob` as they are.
_REQUEST = ("manifest", "rayjob_name", "name_prefix", "dashboard_url_template", "suspend_on_kill")


def check_prices_on_spec(prices: Prices, spec: RayClusterSpec) -> None:
    """Check a price table against the groups a spec will make (a RayJob's cluster does not exist before
    submit), each offering what its pod size and ``ray start`` params give (:class:`RayInvalidInputError`)."""
    groups: dict[str, set[str]] = {}
    sizes = [(g.name, g.cpu, g.gpu, g.ray_start_params) for g in spec.worker_groups]
    for name, cpu, gpu, params in [(HEAD_GROUP, spec.head.cpu, 0, spec.head.ray_start_params), *sizes]:
        has = groups.setdefault(name, {"memory_gib"})
        if str(params.get("num-cpus", cpu)).strip() not in ("0", "0.0"):
            has.add("CPU")
        if gpu or str(params.get("num-gpus", "0")).strip() not in ("0", "0.0"):
            has.add("GPU")
        try:
            custom = json.loads(params.get("resources", "{}").strip("'\""))
        except ValueError:
            custom = {}
        has.update(map(str, custom) if isinstance(custom, dict) else ())
    check_against_cluster(prices, groups)


class KubeRayJobOperator(RunOperator):
    """Run a Ray job as a KubeRay ``RayJob`` and wait for it (in the worker, or deferred).

    Every argument of :class:`RunOperator` too; ``cleanup`` (default ``always``) says when a kill deletes the
    RayJob. The RayJob's own arguments are KubeRay's fields (docs/operators.md, "RayJob").

    :param spec: the cluster KubeRay creates for the job (:class:`RayClusterSpec` or a dict of its fields).
    :param manifest: instead, a RayCluster manifest (dict, YAML text or file) whose spec is used.
    :param cluster: instead, a standing RayCluster: its name or a cluster handle (``clusterSelector``).
    :param suspend_on_kill: where the cleanup table stops the job, suspend the RayJob instead of deleting
        it (KubeRay deletes its cluster; the next try resumes it).
    """

    templated_numbers: ClassVar[dict[str, str]] = {
        **RunOperator.templated_numbers,
        "ttl_seconds_after_finished": "int",
        "active_deadline_seconds": "int",
        "backoff_limit": "int",
        "pre_running_deadline_seconds": "int",
    }
    template_fields = (
        "entrypoint", "runtime_env", "metadata", "spec", "manifest", "cluster", "rayjob_name", "namespace",
        "entrypoint_resources", "queue_name", "artifact_uri", *templated_numbers,
    )  # fmt: skip
    template_fields_renderers = {
        "runtime_env": "json",
        "metadata": "json",
        "spec": "json",
        "manifest": "yaml",
    }
    ui_color = "#d6f0ff"
    default_cleanup: ClassVar[Cleanup] = Cleanup.ALWAYS
    reservation: ClassVar[tuple[str, ...]] = ()  # the RayJob's options carry it

    def __init__(
        self,
        *,
        cluster_conn_id: str | None = None,
        spec: RayClusterSpec | dict[str, Any] | None = None,
        manifest: dict[str, Any] | str | None = None,
        cluster: str | dict[str, Any] | None = None,
        rayjob_name: str | None = None,
        name_prefix: str = "rayjob",
        namespace: str | None = None,
        dashboard_url_template: str | None = None,
        shutdown_after_job_finishes: bool = True,
        ttl_seconds_after_finished: int | None = None,
        active_deadline_seconds: int | None = None,
        backoff_limit: int | None = None,
        submission_mode: str = "K8sJobMode",
        suspend: bool = False,
        queue_name: str | None = None,
        deletion_rules: list[dict[str, Any]] | None = None,
        pre_running_deadline_seconds: int | None = None,
        suspend_on_kill: bool = False,
        **kwargs: Any,
    ) -> None:
        arguments = {name: value for name, value in locals().items() if name in _OPTIONS + _REQUEST}
        super().__init__(**kwargs)
        for name, value in arguments.items():
            setattr(self, name, value)
        self.cluster_conn_id = cluster_conn_id
        self.spec = dataclasses.asdict(spec) if isinstance(spec, RayClusterSpec) else spec
        self.cluster = cluster
        self.namespace = namespace
        if sum(x is not None for x in (self.spec, manifest, cluster)) > 1:
            raise RayInvalidInputError(
                "pass one cluster: spec or manifest (KubeRay creates it for the job), or cluster (a standing "
                "RayCluster, by name or handle), not several"
            )
        literal = {name: self.literal(name) for name in _OPTIONS}  # Jinja is checked once rendered
        check_options(
            RayJobOptions("-", runtime_env={}, metadata={}, **literal), standing=cluster is not None
        )
        if suspend_on_kill and (cluster is not None or not shutdown_after_job_finishes):
            raise RayInvalidInputError(
                "suspend_on_kill needs shutdown_after_job_finishes=True and a cluster spec (KubeRay suspends "
                "a RayJob by deleting its cluster); drop suspend_on_kill"
            )

    def target(self, context: Context) -> RunTarget:
        """The task instance's RayJob: every check (the prices against the spec too), no API call."""
        job = self.job(context)
        options = RayJobOptions(
            entrypoint=job.entrypoint, runtime_env=dict(job.runtime_env), metadata=dict(job.metadata),
            job_id=base_id(context), **{name: getattr(self, name) for name in _OPTIONS},
        )  # fmt: skip
        cluster = self.cluster
        if cluster is not None and not isinstance(cluster, str):  # a standing cluster's handle
            handle = RayClusterHandle.from_dict(cluster)  # RayInvalidInputError: bad input
            if handle.backend != "kuberay":
                raise RayInvalidInputError(
                    f"a RayJob runs on a KubeRay cluster; the handle of {handle.name} is local"
                )
            cluster = handle.name
        spec = ClusterRequest.from_arguments(spec=self.spec, local_options=None).spec  # checked, named
        jobs = rayjobs_for_connection(self.cluster_conn_id, namespace=self.namespace)
        try:
            plan = plan_rayjob(
                jobs, options, task_identity(context), spec=spec, cluster_name=cluster,
                namespace=self.namespace, **{name: getattr(self, name) for name in _REQUEST},
            )  # fmt: skip
            prices = self.prices or connection_prices(self.cluster_conn_id)
            if prices is not None and cluster is None and spec is not None:
                check_prices_on_spec(prices, spec)

        except BaseException:
            jobs.close()
            raise
        return RayJobTarget(jobs, plan, ref={"cluster_conn_id": self.cluster_conn_id})

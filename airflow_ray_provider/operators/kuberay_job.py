"""``KubeRayJobOperator``: a KubeRay ``RayJob``, so Kubernetes itself enforces cleanup and deadlines.

KubeRay creates the RayJob's cluster (or targets a standing one), submits the job and deletes the cluster:
nothing depends on the Airflow worker staying alive. The name is deterministic per task instance, so a
retry re-attaches to it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_ray_provider.clusters import RayClusterHandle, RayClusterSpec, RayJobOptions
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import rayjobs_for_connection
from airflow_ray_provider.launch import Cleanup, RayJobRequest, RayJobTarget, check_options, plan_rayjob
from airflow_ray_provider.launch.usage import HEAD_GROUP, Prices, check_against_cluster
from airflow_ray_provider.operators.base import RunOperator, base_id, connection_prices, task_identity

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import RunTarget

#: The :class:`RayJobOptions` fields that are arguments of the operator as they are.
_OPTIONS = tuple(
    f.name
    for f in dataclasses.fields(RayJobOptions)
    if f.name not in ("entrypoint", "job_id", "runtime_env", "metadata")
)


def check_prices_on_spec(prices: Prices, spec: RayClusterSpec) -> None:
    """Check a price table against the cluster a spec will make (a RayJob's cluster does not exist
    before submit): its head group ``headgroup`` and worker groups, each offering what its pod size and
    ``ray start`` params give.

    :raises RayInvalidInputError: for a price of a resource no group of the spec has.
    """
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

    XCom: ``{"rayjob_name", "namespace", "job_id", "cluster_name", "status", "deployment_status",
    "dashboard_url", "job_url"}``. Every argument of :class:`RunOperator` too (``runtime_env`` goes as
    ``runtimeEnvYAML``, its ``working_dir`` a remote URI); ``cleanup`` (default ``always``) says when a kill
    deletes the RayJob (KubeRay then deletes its cluster); a finished RayJob is kept as its run's record.
    The entrypoint's CPUs and GPUs and the RayJob's numbers may be Jinja, checked once rendered. The
    RayJob's own arguments are KubeRay's fields (docs/operators.md, "RayJob").

    :param cluster_conn_id: a ``kuberay`` connection.
    :param spec: the cluster KubeRay creates for the job (:class:`RayClusterSpec` or a dict of its fields).
    :param manifest: instead, a RayCluster manifest (dict, YAML text or file) whose spec is used.
    :param cluster: instead, a standing RayCluster: its name or a cluster handle (``clusterSelector``).
    :param rayjob_name: a fixed RayJob name (default: generated from dag, run, task and map index).
    :param dashboard_url_template: overrides how the cluster's dashboard is reached (see
        ``CreateRayClusterOperator``).
    :param suspend_on_kill: where the cleanup table stops the job, suspend the RayJob instead of deleting
        it (KubeRay deletes its cluster and keeps the RayJob; the next try resumes it).
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
        options = {name: value for name, value in locals().items() if name in _OPTIONS}
        super().__init__(**kwargs)
        for name, value in options.items():  # RayJob fields, as they are
            setattr(self, name, value)
        self.cluster_conn_id = cluster_conn_id
        self.spec = dataclasses.asdict(spec) if isinstance(spec, RayClusterSpec) else spec
        self.manifest = manifest
        self.cluster = cluster
        self.rayjob_name = rayjob_name
        self.name_prefix = name_prefix
        self.namespace = namespace
        self.dashboard_url_template = dashboard_url_template
        self.suspend_on_kill = suspend_on_kill
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

    def job_reservation(self) -> dict[str, Any]:
        """None: the RayJob's options carry the reservation (checked with them, in :meth:`target`)."""
        return {}

    def _request(self, context: Context) -> RayJobRequest:
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
        try:
            spec = RayClusterSpec.from_dict(self.spec) if self.spec is not None else None
        except ValueError as exc:
            raise RayInvalidInputError(str(exc)) from exc
        return RayJobRequest(
            options=options, spec=spec, manifest=self.manifest, cluster_name=cluster,
            rayjob_name=self.rayjob_name, name_prefix=self.name_prefix, namespace=self.namespace,
            dashboard_url_template=self.dashboard_url_template, suspend_on_kill=self.suspend_on_kill,
        )  # fmt: skip

    def target(self, context: Context) -> RunTarget:
        """The task instance's RayJob: every check (the prices against the spec too), no API call."""
        request = self._request(context)
        jobs = rayjobs_for_connection(self.cluster_conn_id, namespace=self.namespace)
        try:
            plan = plan_rayjob(jobs, request, task_identity(context))
            prices = self.prices or connection_prices(self.cluster_conn_id)
            if prices is not None and plan.standing_cluster is None and request.spec is not None:
                check_prices_on_spec(prices, request.spec)
        except BaseException:
            jobs.close()
            raise
        return RayJobTarget(jobs, plan, ref={"cluster_conn_id": self.cluster_conn_id})

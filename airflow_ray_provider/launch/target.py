"""Where a run's job goes: the targets of :func:`airflow_ray_provider.launch.run`, and their clusters.

==========================  ===============================================  ========================
target                      cluster                                          owned (cleanup deletes)
==========================  ===============================================  ========================
:class:`LocalHead`          an ephemeral Ray head on this machine            yes
:class:`KubeRayCluster`     an ephemeral RayCluster through a kube context   yes
:class:`KubeRayJob`         a KubeRay RayJob through a kube context:         yes: the RayJob, and
                            KubeRay creates its cluster and deletes it       with it its cluster
                            after the job
:class:`StandingCluster`    a running cluster by name: a local head this     no
                            provider started, or a KubeRay RayCluster
:class:`RayAddress`         any running cluster's dashboard (``ray start``)  no
:class:`JobApiTarget`       a Job API client given ready-made (an Airflow    no
                            ``ray`` connection, through the CLI's ``--conn``)
==========================  ===============================================  ========================

A cluster (or RayJob) the run owns is named after the run's ``name``, so a rerun with the same name finds
the same cluster or RayJob (if cleanup kept it) and, through the submission id, the same job. No Airflow
imports.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters import (
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    KubeRayBackend,
    KubeRayJobs,
    LocalBackend,
    LocalClusterOptions,
    RayClusterHandle,
    RayClusterSpec,
    RayJobOptions,
    RayJobPlan,
    RayJobRequest,
    TaskIdentity,
    check_options,
)
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.submission import base_submission_id
from airflow_ray_provider.launch.job_api import JobApiClient, ray_token_from_environment

if TYPE_CHECKING:
    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.ray_job import JobApi

#: The identity every CLI run's cluster and submission id derive from (``run_id`` is the run's name).
CLI_DAG_ID, CLI_TASK_ID = "cli", "run"


@dataclass(frozen=True)
class LocalHead:
    """An ephemeral local Ray head, started for the run.

    :param options: its options (CPUs, GPUs, environment).
    """

    options: LocalClusterOptions = field(default_factory=LocalClusterOptions)


@dataclass(frozen=True)
class KubeRayCluster:
    """An ephemeral KubeRay RayCluster, created through a kube context.

    :param context: the kubeconfig context (``None``: the current one).
    :param namespace: its namespace.
    :param spec: its spec (``RayClusterSpec`` fields; ``None``: the defaults).
    :param dashboard_url_template: how to reach its dashboard from here, e.g. ``http://{name}-head-svc...``.
    """

    context: str | None
    namespace: str
    spec: dict[str, Any] | None = None
    dashboard_url_template: str | None = None


@dataclass(frozen=True)
class KubeRayJob:
    """A KubeRay RayJob through a kube context: KubeRay creates its cluster, submits the job, and deletes
    the cluster when the job ends; the run deletes the RayJob as ``cleanup`` says (its cluster goes too).

    :param context: the kubeconfig context (``None``: the current one).
    :param namespace: its namespace.
    :param spec: the cluster KubeRay creates (``RayClusterSpec`` fields; ``None``: the defaults).
    :param submission_mode: ``K8sJobMode`` (default: a submitter Kubernetes Job), ``HTTPMode`` or
        ``SidecarMode``.
    :param active_deadline_seconds: KubeRay fails the RayJob (``DeadlineExceeded``) after this long
        (``launch.run``'s ``timeout`` sets it, rounded up).
    :param ttl_seconds_after_finished: seconds KubeRay keeps the cluster after the job (``None``: 30).
    :param backoff_limit: KubeRay retries a failed RayJob this many times, each on a new cluster.
    :param dashboard_url_template: how to reach its cluster's dashboard from here (for the log).
    """

    context: str | None
    namespace: str
    spec: dict[str, Any] | None = None
    submission_mode: str = "K8sJobMode"
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    backoff_limit: int | None = None
    dashboard_url_template: str | None = None

    def __post_init__(self) -> None:
        check_options(self.options("-", job_id=None), standing=False)  # modes and numbers, as KubeRay

    def options(self, entrypoint: str, *, job_id: str | None, **job: Any) -> RayJobOptions:
        """The RayJob's options for ``entrypoint`` (``job``: runtime env and metadata)."""
        return RayJobOptions(
            entrypoint=entrypoint,
            job_id=job_id,
            submission_mode=self.submission_mode,
            active_deadline_seconds=self.active_deadline_seconds,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
            backoff_limit=self.backoff_limit,
            **job,
        )


@dataclass(frozen=True)
class StandingCluster:
    """A running cluster by name, attached and never deleted (a Ctrl-C stops the job only).

    :param name: the cluster's name.
    :param namespace: a KubeRay RayCluster in this namespace (``None``: a local head this provider
        started on this machine, e.g. ``airflow-ray run --local --cleanup never`` or another DAG's).
    :param context: with ``namespace``: the kubeconfig context (``None``: the current one).
    :param dashboard_url_template: with ``namespace``: how to reach its dashboard from here.
    """

    name: str
    namespace: str | None = None
    context: str | None = None
    dashboard_url_template: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise RayInvalidInputError("a standing cluster needs its name")
        if self.namespace is None and (self.context or self.dashboard_url_template):
            raise RayInvalidInputError(
                "context and dashboard_url_template go with namespace (a KubeRay RayCluster); without a "
                "namespace the standing cluster is a local head"
            )


@dataclass(frozen=True)
class RayAddress:
    """A running cluster by its dashboard address (e.g. a head started with ``ray start --head``).

    :param dashboard_url: ``http(s)://host:port`` of its dashboard.
    :param token: its Ray auth token (``None``: read it as Ray's own CLI does, from ``$RAY_AUTH_TOKEN``
        or ``~/.ray/auth_token``, else no token).
    """

    dashboard_url: str
    token: str | None = None

    def __post_init__(self) -> None:
        if not self.dashboard_url.startswith(("http://", "https://")):
            raise RayInvalidInputError(
                f"a Ray address must be the dashboard's http(s)://host:port, got {self.dashboard_url!r}"
            )


@dataclass(frozen=True)
class JobApiTarget:
    """A ready-made Job API client (the Airflow hook of a ``ray`` connection, say).

    :param api: anything with the :class:`~airflow_ray_provider.launch.ray_job.JobApi` methods.
    :param dashboard_url: its dashboard, for links.
    """

    api: Any
    dashboard_url: str


Target = LocalHead | KubeRayCluster | KubeRayJob | StandingCluster | RayAddress | JobApiTarget
#: The targets reached through a kube context.
KubeTarget = KubeRayCluster | KubeRayJob | StandingCluster


@dataclass
class Reached:
    """A target made ready: the Job API to use and, for a cluster the run created, how to delete it.

    :param api: the cluster's Job API.
    :param dashboard_url: its dashboard.
    :param backend: the backend of an owned cluster (``None``: the run owns no cluster).
    :param handle: the owned cluster's handle.
    """

    api: JobApi
    dashboard_url: str
    backend: ClusterBackend | None = None
    handle: RayClusterHandle | None = None

    def delete_cluster(self, *, timeout: float = 300) -> bool:
        """Delete the cluster the run created (nothing for a cluster it did not create)."""
        if self.backend is None or self.handle is None:
            return False
        return self.backend.delete(self.handle, wait=True, timeout=timeout)

    def close(self) -> None:
        """Release the backend's clients."""
        if self.backend is not None:
            self.backend.close()


def run_name(name: str | None) -> str:
    """The run's name: given (a rerun with it re-attaches), or a fresh one."""
    return name if name else f"run-{uuid.uuid4().hex[:8]}"


def cluster_request(target: LocalHead | KubeRayCluster) -> ClusterRequest:
    """The cluster request of an owned-cluster target (every check, no I/O)."""
    if isinstance(target, LocalHead):
        return ClusterRequest(local_options=target.options, name_prefix="ray-cli")
    return ClusterRequest.from_arguments(
        spec=target.spec if target.spec is not None else {},
        local_options=None,
        name_prefix="ray-cli",
        namespace=target.namespace,
        dashboard_url_template=target.dashboard_url_template,
    )


def identity(name: str) -> TaskIdentity:
    """The identity of a run (its cluster's name and labels, its submission id derive from it)."""
    return TaskIdentity(CLI_DAG_ID, name, CLI_TASK_ID)


def kuberay_backend(target: KubeTarget) -> KubeRayBackend:
    """A KubeRay backend through a kube context (the ``kubernetes`` package's own kubeconfig loading)."""
    from kubernetes import config

    from airflow_ray_provider.clusters import KubeRaySettings
    from airflow_ray_provider.kuberay import KubeRayClient

    namespace = target.namespace or "default"
    api_client = config.new_client_from_config(context=target.context)
    settings = KubeRaySettings(
        conn_id=f"kube-context:{target.context or 'current'}",
        namespace=namespace,
        dashboard_url_template=target.dashboard_url_template,
    )
    return KubeRayBackend(settings, lambda: KubeRayClient(api_client, namespace=namespace))


def plan_rayjob(target: KubeRayJob, job: JobSpec, name: str) -> tuple[KubeRayJobs, RayJobPlan]:
    """The RayJobs of the target's context and the run's RayJob, checked as KubeRay would (no API call).

    :raises RayInvalidInputError: naming the field (a local ``working_dir`` among them: KubeRay submits
        from inside the cluster).
    """
    try:
        spec = RayClusterSpec.from_dict(target.spec) if target.spec is not None else None
    except ValueError as exc:
        raise RayInvalidInputError(f"spec: {exc}") from exc
    base = base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID)
    options = target.options(
        job.entrypoint, job_id=base, runtime_env=dict(job.runtime_env), metadata=dict(job.metadata)
    )
    request = RayJobRequest(
        options=options,
        spec=spec,
        name_prefix="ray-cli",
        namespace=target.namespace,
        dashboard_url_template=target.dashboard_url_template,
    )
    jobs = KubeRayJobs(kuberay_backend(target))
    try:
        return jobs, jobs.plan(request, identity(name))
    except BaseException:
        jobs.close()
        raise


def job_api_of(backend: ClusterBackend, handle: RayClusterHandle) -> JobApiClient:
    """The Job API of a cluster's handle, with its token (a local head's file, or a KubeRay Secret)."""
    return JobApiClient(handle.dashboard_url, token=_token_of(backend, handle))


def _token_of(backend: ClusterBackend, handle: RayClusterHandle) -> str | None:
    if handle.auth_token_file:  # the local head's 0600 token file
        return Path(handle.auth_token_file).read_text().strip()
    if handle.auth_token_secret:
        client = backend.client  # type: ignore[attr-defined]  # KubeRay backend
        return str(
            client.read_secret_value(
                handle.auth_token_secret,
                key=handle.auth_token_secret_key or "auth_token",
                namespace=handle.namespace,
            )
        )
    return None


def plan_cluster(target: LocalHead | KubeRayCluster, name: str) -> tuple[ClusterBackend, ClusterPlan]:
    """The backend and plan of the run's own cluster (checks only)."""
    request = cluster_request(target)
    backend: ClusterBackend = LocalBackend() if isinstance(target, LocalHead) else kuberay_backend(target)
    return backend, backend.plan(request, identity(name))


def reach(target: Target, name: str, *, ready_timeout: float = 900, log: Any = None) -> Reached:
    """Make the target ready: start (or find) the run's own cluster and wait until its dashboard answers."""
    if isinstance(target, JobApiTarget):
        return Reached(target.api, target.dashboard_url)
    if isinstance(target, RayAddress):
        token = target.token if target.token is not None else ray_token_from_environment()
        return Reached(JobApiClient(target.dashboard_url, token=token), target.dashboard_url)
    if isinstance(target, StandingCluster):
        return _attach(target, log)
    if isinstance(target, KubeRayJob):
        raise TypeError("a KubeRay RayJob is run by launch.run's RayJob path, not reached as a cluster")
    backend, plan = plan_cluster(target, name)
    reached = Reached(JobApiClient("http://unset"), "", backend)
    try:
        created = backend.ensure(plan)
        if log is not None:
            log(f"{'Started' if created else 'Re-attached to'} Ray cluster {plan.name}")
        event = backend.wait(plan, timeout=ready_timeout, poll_interval=2.0)
        if event["status"] != "ready" or not event["dashboard_url"]:
            backend.fail(plan, event)  # deletes what ensure made, raises with the conditions
        handle = backend.handle(plan, event["dashboard_url"])
    except BaseException:
        backend.close()
        raise
    reached.handle = handle
    reached.dashboard_url = handle.dashboard_url
    reached.api = job_api_of(backend, handle)
    return reached


def _attach(target: StandingCluster, log: Any) -> Reached:
    """A standing cluster: the backend's own ``attach`` (its ``check``, once: it is up now, or an error)."""
    backend: ClusterBackend = LocalBackend() if target.namespace is None else kuberay_backend(target)
    try:
        handle = backend.attach(target.name)
        api = job_api_of(backend, handle)
    finally:
        backend.close()
    if log is not None:
        log(f"Attached to standing Ray cluster {handle.name} ({handle.backend}); it is never deleted")
    return Reached(api, handle.dashboard_url)

"""Where a run's job goes: the targets of :func:`airflow_ray_provider.launch.run`, and their clusters.

==========================  ===============================================  ========================
target                      cluster                                          owned (cleanup deletes)
==========================  ===============================================  ========================
:class:`LocalHead`          an ephemeral Ray head on this machine            yes
:class:`KubeRayCluster`     an ephemeral RayCluster through a kube context   yes
:class:`RayAddress`         any running cluster's dashboard (``ray start``)  no
:class:`JobApiTarget`       a Job API client given ready-made (an Airflow    no
                            ``ray`` connection, through the CLI's ``--conn``)
==========================  ===============================================  ========================

A cluster the run owns is named after the run's ``name``, so a rerun with the same name finds the same
cluster (if cleanup kept it) and, through the submission id, the same job. No Airflow imports.
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
    LocalBackend,
    LocalClusterOptions,
    RayClusterHandle,
    TaskIdentity,
)
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch.job_api import JobApiClient, ray_token_from_environment

if TYPE_CHECKING:
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


Target = LocalHead | KubeRayCluster | RayAddress | JobApiTarget


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


def kuberay_backend(target: KubeRayCluster) -> ClusterBackend:
    """A KubeRay backend through a kube context (the ``kubernetes`` package's own kubeconfig loading)."""
    from kubernetes import config

    from airflow_ray_provider.clusters import KubeRayBackend, KubeRaySettings
    from airflow_ray_provider.kuberay.client import KubeRayClient

    api_client = config.new_client_from_config(context=target.context)
    settings = KubeRaySettings(
        conn_id=f"kube-context:{target.context or 'current'}",
        namespace=target.namespace,
        dashboard_url_template=target.dashboard_url_template,
    )
    return KubeRayBackend(settings, lambda: KubeRayClient(api_client, namespace=target.namespace))


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
    reached.api = JobApiClient(handle.dashboard_url, token=_token_of(backend, handle))
    return reached

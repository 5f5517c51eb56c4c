"""Where a run's job goes: the Job API of a Ray cluster, and the targets a laptop run names.

:class:`ClusterTarget` is the :class:`~airflow_ray_provider.launch.run.RunTarget` of every job that goes
through the Ray Job API: on a cluster given ready (a ``ray`` connection, an address, a cluster handle),
attached by name (never deleted), or created for the run through a
:class:`~airflow_ray_provider.clusters.ClusterBackend` (owned: cleanup deletes it, even half-started).
A KubeRay RayJob is the other kind (:mod:`.rayjob`).

``launch.run`` and the CLI name their target with the plain descriptions below; :func:`resolve` turns one
into a run target:

==========================  ===============================================  ========================
target                      cluster                                          owned (cleanup deletes)
==========================  ===============================================  ========================
:class:`LocalHead`          an ephemeral Ray head on this machine            yes
:class:`KubeRayCluster`     an ephemeral RayCluster through a kube context   yes
:class:`KubeRayJob`         a KubeRay RayJob through a kube context: KubeRay  the RayJob (a stopped
                            creates its cluster and deletes it after the job  run deletes it)
:class:`StandingCluster`    a running cluster by name: a local head this     no
                            provider started, or a KubeRay RayCluster
:class:`RayAddress`         any running cluster's dashboard (``ray start``)  no
:class:`Connection`         a ready Job API client (an Airflow ``ray``       no
                            connection, through the CLI's ``--conn``)
==========================  ===============================================  ========================

A cluster or RayJob the run owns is named after the run's ``name``, so a rerun with the same name finds
it (if cleanup kept it) and, through the submission id, the same job. No Airflow imports.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow_ray_provider.clusters import (
    ClusterRequest,
    LocalBackend,
    LocalClusterOptions,
    PoolOptions,
    RayClusterSpec,
    RayJobOptions,
    TaskIdentity,
)
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.client import JobClient, ray_token_from_environment
from airflow_ray_provider.jobs.outcome import dashboard_job_url, job_result, raise_for_state
from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.jobs.submission import Choice, submit_or_attach
from airflow_ray_provider.launch.rayjob import RayJobRequest, RayJobTarget, check_options, plan_rayjob
from airflow_ray_provider.launch.run import RunTarget
from airflow_ray_provider.launch.wait import Observation, wait_until_ready

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import ClusterBackend, ClusterPlan, KubeRayBackend, RayClusterHandle
    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.pool import PoolLease

log = logging.getLogger(__name__)

#: The identity every CLI run's cluster and submission id derive from (``run_id`` is the run's name).
CLI_DAG_ID, CLI_TASK_ID = "cli", "run"


def observed(state: JobState | None, text: str | None) -> Observation:
    """An observation of a Job API job (``None``: not found)."""
    if state is None:
        return Observation(time.time())
    return Observation(time.time(), state, state.is_terminal, state.is_success, text)


class ClusterTarget(RunTarget):
    """The Job API of one Ray cluster: given ready, attached by name, or created for the run.

    :param client: a ready client (a connection, an address).
    :param handle: a cluster handle (another task's cluster): reached with ``backend``'s token.
    :param backend: the backend that reaches ``handle``, attaches ``standing`` or creates ``plan``.
    :param plan: a cluster to create for the run (or find, on a rerun): the run owns it.
    :param standing: a standing cluster's name (attached, never deleted).
    :param pool: with ``plan`` (the pool's cluster, :func:`~.pool.pool_plan`) and ``spec`` (its
        fingerprint, :func:`~.pool.spec_of`): the run leases the pool's cluster, renews the lease at
        every look, and releases it at its end; cleanup never deletes the cluster.
    :param owned: cleanup may delete the cluster (set with ``plan``, or with the handle of one the
        run created before a deferral).
    :param ready_timeout: seconds to wait for a created cluster.
    :param delete_timeout: seconds to wait for a deleted cluster to be gone.
    :param link_url: the dashboard as people reach it (default: the handle's, else the client's).
    :param ref: how the face makes this target again after a deferral (JSON, no secret).
    :param connect: makes the client of a handle (default: the backend's, with its token).
    """

    def __init__(
        self,
        *,
        client: JobClient | None = None,
        handle: RayClusterHandle | None = None,
        backend: ClusterBackend | None = None,
        plan: ClusterPlan | None = None,
        standing: str | None = None,
        pool: PoolLease | None = None,
        spec: dict[str, str] | None = None,
        owned: bool = False,
        ready_timeout: float = 900.0,
        delete_timeout: float = 300.0,
        link_url: str | None = None,
        ref: dict[str, Any] | None = None,
        connect: Callable[[RayClusterHandle], JobClient] | None = None,
    ) -> None:
        self.client, self.handle, self.backend, self.plan = client, handle, backend, plan
        self.pool, self.spec = pool, spec or {}
        self.standing, self.stop_takes_cluster = standing, False
        self.owned = owned or (plan is not None and pool is None)
        self.ready_timeout, self.delete_timeout = ready_timeout, delete_timeout
        self.dashboard_url = link_url or (handle.link_url if handle else client.address if client else None)
        self._ref = ref or {}
        self._connect = connect or (lambda h: self._backend().job_client(h))
        self.creating = False

    def _backend(self) -> ClusterBackend:
        if self.backend is None:
            raise RayInvalidInputError("this target has no cluster backend")
        return self.backend

    def ref(self) -> dict[str, Any]:
        """The face's reference, with the handle once known (its token stays where it is)."""
        handle = self.handle.to_dict() if self.handle is not None else None
        pool = self.pool.ref() if self.pool is not None else {}
        return {**self._ref, **pool, "handle": handle, "owned": self.owned}

    def reach(self, say: Callable[[str], None]) -> None:
        """Create (or find) the run's cluster and wait until it answers, or attach the standing one."""
        if self.client is not None:
            return
        if self.pool is not None and self.plan is not None and self.handle is None:
            self.handle = self.pool.acquire(self.plan, self.spec, timeout=self.ready_timeout, say=say)
        elif self.plan is not None and self.handle is None:
            self.creating = True  # from here on, delete() deletes by the plan's name
            created = self._backend().ensure(self.plan)
            say(f"{'Started' if created else 'Re-attached to'} Ray cluster {self.plan.name}")
            self.handle = wait_until_ready(
                self._backend(), self.plan, timeout=self.ready_timeout, poll_interval=2.0
            )
        elif self.handle is None:
            self.handle = self._backend().attach(self.standing or "")
            say(f"Attached to standing Ray cluster {self.handle.name} ({self.handle.backend}); never deleted")
        self.client = self._connect(self.handle)
        self.dashboard_url = self.dashboard_url or self.handle.link_url

    def _client(self) -> JobClient:
        if self.client is None:
            self.client = self._connect(self.handle) if self.handle is not None else None
        if self.client is None:
            raise RayInvalidInputError("the cluster is not reached yet")
        return self.client

    def submit(self, job: JobSpec, base_id: str) -> tuple[Choice, str, Any]:
        """Submit by the re-attach rule: a live or succeeded job of this run is found, never duplicated."""
        client = self._client()
        decision = submit_or_attach(base_id, client.list_jobs, lambda sid: client.submit(job, sid))
        return decision.choice, decision.submission_id, decision.state

    def look(self, submission_id: str, *, with_log: bool) -> Observation:
        """One look: the job's state and, when streaming, its log (a pool's lease renewed when due)."""
        if self.pool is not None:
            self.pool.heartbeat()
        state = self._client().get_job(submission_id)
        return observed(
            state, self._client().get_logs(submission_id) if state is not None and with_log else None
        )

    async def alook(self, submission_id: str, *, with_log: bool) -> Observation:
        """One look through the async reader (a pool's lease renewed in a thread when due)."""
        if self.pool is not None:
            await asyncio.to_thread(self.pool.heartbeat)
        state = await self._client().aget_job(submission_id)
        text = await self._client().aget_logs(submission_id) if state is not None and with_log else None
        return observed(state, text)

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job."""
        return self._client().stop(submission_id)

    async def astop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job, from an event loop."""
        return await self._client().astop(submission_id)

    def dashboard(self) -> JobClient | None:
        """The cluster's client."""
        return self._client()

    def logs(self, submission_id: str) -> str:
        """The job's log, ``""`` when it cannot be read."""
        try:
            return self._client().get_logs(submission_id)
        except Exception as exc:
            log.warning("Could not read the log of Ray job %s: %s", submission_id, exc)
            return ""

    def result(self, subject: JobState, logs: Callable[[], str], tail_lines: int) -> dict[str, Any]:
        """``{"submission_id", "status", "dashboard_url", "job_url"}``; raises for FAILED or STOPPED."""
        if not subject.is_success:
            raise_for_state(subject, logs(), tail_lines=tail_lines)
        return job_result(subject, self.dashboard_url or self._client().address)

    def link(self, submission_id: str) -> str | None:
        """The job's page in the dashboard; for a cluster its run deletes when done (another task's, or
        this run's own), the link says so: ``?ray_cluster=<name>&ephemeral=deleted-when-done`` (the
        dashboard ignores the query; a browser shows it on the page that no longer answers)."""
        if not self.dashboard_url:
            return None
        url = dashboard_job_url(self.dashboard_url, submission_id)
        cluster = self.handle or self.plan
        if cluster is None or (self.handle is not None and not self.handle.owned and not self.owned):
            return url
        base, _, fragment = url.partition("#")
        query = urlencode({"ray_cluster": cluster.name, "ephemeral": "deleted-when-done"})
        return f"{base.rstrip('/')}/?{query}#{fragment}"

    def restore(self, data: dict[str, Any]) -> JobState:
        """A handed-over state of the job."""
        return JobState.from_dict(data)

    def delete(self, say: Callable[[str], None]) -> bool:
        """Delete the run's own cluster, also one still starting; never a cluster the run did not create."""
        what = self.handle if self.handle is not None else self.plan if self.creating else None
        if not self.owned or what is None:
            return False
        existed = self._backend().delete(what, wait=True, timeout=self.delete_timeout)
        say(f"Deleted Ray cluster {what.name}" if existed else f"Ray cluster {what.name} was already gone")
        return existed

    def release(self, say: Callable[[str], None]) -> None:
        """End the pool's lease (the pool's cluster stays for its idle TTL)."""
        if self.pool is not None:
            self.pool.release(say)

    def keep(self, say: Callable[[str], None]) -> None:
        """Say that the run's own cluster is kept."""
        what = self.handle or self.plan
        if what is not None:
            say(f"Kept Ray cluster {what.name}; the janitor deletes it after its expiry")

    def close(self) -> None:
        """Release the backend's clients."""
        if self.backend is not None:
            self.backend.close()


# --------------------------------------------------------------------------- what a laptop run names
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
    the cluster when the job ends; a run that gives up (a timeout, Ctrl-C) deletes the RayJob.

    :param context: the kubeconfig context (``None``: the current one).
    :param namespace: its namespace.
    :param spec: its cluster's spec (``RayClusterSpec`` fields; ``None``: the defaults).
    :param submission_mode: ``K8sJobMode``, ``HTTPMode`` or ``SidecarMode``.
    :param active_deadline_seconds: KubeRay fails the RayJob after this many seconds
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
            entrypoint=entrypoint, job_id=job_id, submission_mode=self.submission_mode,
            active_deadline_seconds=self.active_deadline_seconds,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished, backoff_limit=self.backoff_limit,
            **job,
        )  # fmt: skip


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
class Connection:
    """A ready Job API client (the one of an Airflow ``ray`` connection, say).

    :param client: the client.
    """

    client: JobClient


Target = LocalHead | KubeRayCluster | KubeRayJob | StandingCluster | RayAddress | Connection


def kuberay_backend(context: str | None, namespace: str, template: str | None = None) -> KubeRayBackend:
    """A KubeRay backend through a kube context (the ``kubernetes`` package's own kubeconfig loading)."""
    from kubernetes import config

    from airflow_ray_provider.clusters import KubeRayBackend, KubeRaySettings
    from airflow_ray_provider.kuberay import KubeRayClient

    api_client = config.new_client_from_config(context=context)
    settings = KubeRaySettings(
        conn_id=f"kube-context:{context or 'current'}", namespace=namespace, dashboard_url_template=template
    )
    return KubeRayBackend(settings, lambda: KubeRayClient(api_client, namespace=namespace))


def cluster_request(target: LocalHead | KubeRayCluster) -> ClusterRequest:
    """The request of an owned cluster (every check, no I/O)."""
    if isinstance(target, LocalHead):
        return ClusterRequest(local_options=target.options, name_prefix="ray-cli")
    return ClusterRequest.from_arguments(
        spec=target.spec if target.spec is not None else {}, local_options=None, name_prefix="ray-cli",
        namespace=target.namespace, dashboard_url_template=target.dashboard_url_template,
    )  # fmt: skip


def resolve(target: Target, name: str, job: JobSpec, pool: PoolOptions | None = None) -> RunTarget:
    """The run target of a laptop run's ``target`` (every check; a KubeRay API client at most, no call).

    :param pool: run on this pool's cluster, of ``target``'s spec (a local head or a KubeRay cluster).

    :raises RayInvalidInputError: naming the field (a RayJob's spec, or a local ``working_dir``, which
        KubeRay cannot ship: it submits from inside the cluster).
    """
    if pool is not None and not isinstance(target, (LocalHead, KubeRayCluster)):
        raise RayInvalidInputError(
            f"pool: a pool's cluster is a local head or a KubeRay cluster, not a {type(target).__name__}"
        )
    if isinstance(target, Connection):
        return ClusterTarget(client=target.client)
    if isinstance(target, RayAddress):
        token = target.token if target.token is not None else ray_token_from_environment()
        return ClusterTarget(client=JobClient(target.dashboard_url, token=token))
    if isinstance(target, StandingCluster):
        backend: ClusterBackend = (
            LocalBackend() if target.namespace is None
            else kuberay_backend(target.context, target.namespace, target.dashboard_url_template)
        )  # fmt: skip
        return ClusterTarget(backend=backend, standing=target.name)
    if isinstance(target, KubeRayJob):
        return _rayjob_target(target, name, job)
    backend = (
        LocalBackend() if isinstance(target, LocalHead)
        else kuberay_backend(target.context, target.namespace, target.dashboard_url_template)
    )  # fmt: skip
    try:
        request = cluster_request(target)
        if pool is not None:
            from airflow_ray_provider.jobs.submission import base_submission_id
            from airflow_ray_provider.launch.pool import PoolLease, pool_plan, spec_of

            lease = PoolLease(backend, pool, base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID))
            return ClusterTarget(backend=backend, plan=pool_plan(backend, request, pool), pool=lease,
                                 spec=spec_of(request))  # fmt: skip
        plan = backend.plan(request, TaskIdentity(CLI_DAG_ID, name, CLI_TASK_ID))
        return ClusterTarget(backend=backend, plan=plan)
    except BaseException:
        backend.close()
        raise


def _rayjob_target(target: KubeRayJob, name: str, job: JobSpec) -> RunTarget:
    from airflow_ray_provider.jobs.submission import base_submission_id

    try:
        spec = RayClusterSpec.from_dict(target.spec) if target.spec is not None else None
    except ValueError as exc:
        raise RayInvalidInputError(f"spec: {exc}") from exc
    base = base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID)
    options = target.options(job.entrypoint, job_id=base, runtime_env=dict(job.runtime_env),
                             metadata=dict(job.metadata))  # fmt: skip
    request = RayJobRequest(options=options, spec=spec, name_prefix="ray-cli", namespace=target.namespace,
                            dashboard_url_template=target.dashboard_url_template)  # fmt: skip
    backend = kuberay_backend(target.context, target.namespace, target.dashboard_url_template)
    identity = TaskIdentity(CLI_DAG_ID, name, CLI_TASK_ID)
    try:
        return RayJobTarget(backend, plan_rayjob(backend, request, identity))
    except BaseException:
        backend.close()
        raise

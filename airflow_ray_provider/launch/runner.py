"""``launch.run``: a whole run in one call, for a laptop (the ``airflow-ray`` CLI) or a script: a
:class:`~.run.JobRun` with the terminal's defaults (log to stdout, status to stderr, Ctrl-C a user's kill)
on a target named by the dataclasses below; a rerun with the same ``name`` finds its cluster and job. No
Airflow imports.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters import (
    ClusterRequest,
    LocalBackend,
    LocalClusterOptions,
    RayJobOptions,
    TaskIdentity,
)
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs import JobState, JobStatus
from airflow_ray_provider.jobs.client import JobClient, ray_token_from_environment
from airflow_ray_provider.jobs.submission import (
    Choice,
    JobSpec,
    base_submission_id,
    build_entrypoint,
    check_runtime_env,
)
from airflow_ray_provider.launch.pool import PoolOptions, cluster_target, pool_options
from airflow_ray_provider.launch.rayjob import RayJobTarget, check_options, plan_rayjob
from airflow_ray_provider.launch.run import Cleanup, JobRun, RunTarget, print_lines
from airflow_ray_provider.launch.targets import ClusterTarget

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import ClusterBackend, KubeRayBackend

#: The identity every CLI run's cluster and submission id derive from (``run_id`` is the run's name).
CLI_DAG_ID, CLI_TASK_ID = "cli", "run"


@dataclass(frozen=True)
class LocalHead:
    """An ephemeral local Ray head, started for the run (owned: cleanup deletes it)."""

    options: LocalClusterOptions = field(default_factory=LocalClusterOptions)


@dataclass(frozen=True)
class KubeRayCluster:
    """An ephemeral KubeRay RayCluster, created through a kube context (owned: cleanup deletes it).

    :param context: the kubeconfig context (``None``: the current one).
    :param spec: ``RayClusterSpec`` fields (``None``: the defaults).
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
    :param spec: its cluster's ``RayClusterSpec`` fields (``None``: the defaults).
    :param submission_mode: ``K8sJobMode``, ``HTTPMode`` or ``SidecarMode``.
    :param active_deadline_seconds: KubeRay fails the RayJob after this many seconds (``launch.run``'s
        ``timeout`` sets it, rounded up).
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

    def options(self, entrypoint: str, **job: Any) -> RayJobOptions:
        """The RayJob's options for ``entrypoint`` (``job``: its id, runtime env and metadata)."""
        names = ("submission_mode", "active_deadline_seconds", "ttl_seconds_after_finished", "backoff_limit")
        return RayJobOptions(entrypoint=entrypoint, **{name: getattr(self, name) for name in names}, **job)


@dataclass(frozen=True)
class StandingCluster:
    """A running cluster by name, attached and never deleted (a Ctrl-C stops the job only).

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
    """A running cluster by its dashboard's ``http(s)://host:port`` (e.g. ``ray start --head``), never
    deleted. ``token``: its Ray auth token (``None``: as Ray's own CLI reads it, from ``$RAY_AUTH_TOKEN``
    or ``~/.ray/auth_token``, else none)."""

    dashboard_url: str
    token: str | None = None

    def __post_init__(self) -> None:
        if not self.dashboard_url.startswith(("http://", "https://")):
            raise RayInvalidInputError(
                f"a Ray address must be the dashboard's http(s)://host:port, got {self.dashboard_url!r}"
            )


@dataclass(frozen=True)
class Connection:
    """A ready Job API client (an Airflow ``ray`` connection's, through the CLI's ``--conn``), never
    deleted."""

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


def resolve(target: Target, name: str, job: JobSpec, pool: PoolOptions | None = None) -> RunTarget:
    """The run target of a laptop run's ``target`` (every check; a KubeRay API client at most, no call).

    :param pool: run on this pool's cluster, of ``target``'s spec (a local head or a KubeRay cluster).
    :raises RayInvalidInputError: naming the field.
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
    identity = TaskIdentity(CLI_DAG_ID, name, CLI_TASK_ID)
    if isinstance(target, KubeRayJob):
        spec = ClusterRequest.from_arguments(spec=target.spec, local_options=None).spec  # checked, named
        options = target.options(job.entrypoint, job_id=base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID),
                                 runtime_env=dict(job.runtime_env), metadata=dict(job.metadata))  # fmt: skip
        jobs = kuberay_backend(target.context, target.namespace, target.dashboard_url_template)
        try:
            return RayJobTarget(jobs, plan_rayjob(jobs, options, identity, spec=spec, name_prefix="ray-cli"))
        except BaseException:
            jobs.close()
            raise
    if isinstance(target, LocalHead):
        request = ClusterRequest(local_options=target.options, name_prefix="ray-cli")
    elif isinstance(target, KubeRayCluster):  # checked before the backend exists (nothing to close)
        request = ClusterRequest.from_arguments(
            spec=target.spec or {}, local_options=None, name_prefix="ray-cli", namespace=target.namespace,
            dashboard_url_template=target.dashboard_url_template,
        )  # fmt: skip
    backend: ClusterBackend = LocalBackend()
    if not isinstance(target, LocalHead) and target.namespace is not None:
        backend = kuberay_backend(target.context, target.namespace, target.dashboard_url_template)
    if isinstance(target, StandingCluster):
        return ClusterTarget(backend=backend, standing=target.name)
    return cluster_target(backend, request, identity, pool)


@dataclass(frozen=True)
class RunResult:
    """A succeeded run: its ``name`` (rerun with it to re-attach), the job's final ``state``, the
    cluster's ``dashboard_url``, and whether the job was ``reattached`` (not submitted by this call)."""

    name: str
    state: JobState
    dashboard_url: str
    reattached: bool


def _say(message: str) -> None:
    print(f"airflow-ray: {message}", file=sys.stderr, flush=True)


def run(
    entrypoint: str | list[str],
    *,
    target: Target,
    name: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    working_dir: str | Path | None = None,
    cleanup: Cleanup | str = Cleanup.ON_EXCEPTION,
    timeout: float | None = None,
    poll_interval: float = 1.0,
    pool: PoolOptions | dict[str, Any] | None = None,
    entrypoint_num_cpus: float | None = None,
    entrypoint_num_gpus: float | None = None,
    emit: Callable[[list[str]], None] = print_lines,
    say: Callable[[str], None] = _say,
) -> RunResult:
    """Run ``entrypoint`` as a Ray job on ``target``, streaming its log; clean up as ``cleanup`` says.

    :param entrypoint: shell command, or a list of arguments (quoted safely).
    :param name: the run's name: a rerun with the same name re-attaches instead of submitting again.
    :param working_dir: a local folder Ray packages and ships with the job (your dev checkout).
    :param cleanup: ``never``, ``on_exception`` (default) or ``always`` (docs/launch.md, "Cleanup").
    :param timeout: seconds from the job's start before it is stopped and the run fails (a RayJob:
        its ``activeDeadlineSeconds``, which KubeRay enforces).
    :param pool: run on this pool's cluster (``PoolOptions`` or its fields, e.g. ``{"name": "eval",
        "idle_ttl": 600}``), of ``target``'s spec, shared with every run that names the pool
        (docs/launch.md, "Pools").
    :param entrypoint_num_cpus: CPUs the entrypoint reserves: the job waits in Ray's queue until they are
        free (jobs beyond a pool's capacity queue rather than share its cores).
    :param emit: writes job-log lines (default: stdout).
    :param say: writes status lines (default: stderr).
    :raises RayInvalidInputError: bad input, before any cluster exists.
    :raises RayJobFailedError, RayJobStoppedError, RayJobTimeoutError, KubeRayJobError: the job's ending.
    :raises KeyboardInterrupt: after cleaning up as a user's kill (Ctrl-C).
    """
    policy = Cleanup(cleanup)
    name = name or f"run-{uuid.uuid4().hex[:8]}"
    env = check_runtime_env(runtime_env)
    if working_dir is not None:
        if not Path(working_dir).is_dir():
            raise RayInvalidInputError(f"working_dir {str(working_dir)!r} is not a folder")
        env["working_dir"] = str(Path(working_dir).resolve())
    spec = JobSpec(
        build_entrypoint(entrypoint), runtime_env=env, metadata={"airflow_ray_run": name},
        entrypoint_num_cpus=entrypoint_num_cpus, entrypoint_num_gpus=entrypoint_num_gpus,
    )  # fmt: skip
    if timeout is not None and isinstance(target, KubeRayJob):  # its activeDeadlineSeconds, KubeRay's
        if target.active_deadline_seconds is not None:
            raise RayInvalidInputError("pass timeout or the RayJob's active_deadline_seconds, not both")
        target = dataclasses.replace(target, active_deadline_seconds=max(1, math.ceil(timeout)))
        timeout = None
    where = resolve(target, name, spec, pool_options(pool, poll_interval))  # every check; nothing started yet
    base = base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID)
    with JobRun(where, job=spec, base_id=base, cleanup=policy, timeout=timeout, poll_interval=poll_interval,
                on_lines=emit, say=say) as job_run:  # fmt: skip
        job_run.reach()
        job_run.submit()
        job_run.wait()
        result = job_run.result()
    state = job_run.subject
    if not isinstance(state, JobState):  # a RayJob: its Ray job's final state
        state = JobState(str(result["job_id"]), JobStatus(result["status"]))
    return RunResult(name, state, result.get("dashboard_url") or "", job_run.choice is not Choice.SUBMIT)

"""The run lifecycle, Airflow-free: :class:`JobRun` owns a Ray job's run from its first instant to its
cleanup. Operators, the sensor, the triggers and ``@task.ray`` are Airflow shells over it; :func:`run` and
the ``airflow-ray`` CLI are terminal shells.
"""

from airflow_ray_provider.exceptions import RayJobFailedError
from airflow_ray_provider.launch.pool import (
    PoolLease,
    PoolOptions,
    cluster_target,
    janitor_sweep,
    pool_options,
)
from airflow_ray_provider.launch.rayjob import RayJobTarget, check_options, plan_rayjob
from airflow_ray_provider.launch.run import Cleanup, Ending, JobRun, RunTarget, apoll
from airflow_ray_provider.launch.runner import (
    Connection,
    KubeRayCluster,
    KubeRayJob,
    LocalHead,
    RayAddress,
    RunResult,
    StandingCluster,
    Target,
    kuberay_backend,
    run,
)
from airflow_ray_provider.launch.targets import (
    ClusterTarget,
    readiness_rule,
    ready_handle,
    wait_until_ready,
)
from airflow_ray_provider.launch.usage import UsageOptions

__all__ = [
    "Cleanup",
    "ClusterTarget",
    "Connection",
    "Ending",
    "JobRun",
    "KubeRayCluster",
    "KubeRayJob",
    "LocalHead",
    "PoolLease",
    "PoolOptions",
    "RayAddress",
    "RayJobFailedError",
    "RayJobTarget",
    "RunResult",
    "RunTarget",
    "StandingCluster",
    "Target",
    "UsageOptions",
    "apoll",
    "check_options",
    "cluster_target",
    "janitor_sweep",
    "kuberay_backend",
    "plan_rayjob",
    "pool_options",
    "readiness_rule",
    "ready_handle",
    "run",
    "wait_until_ready",
]

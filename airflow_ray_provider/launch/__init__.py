"""The run lifecycle, Airflow-free: wait for a job with one pure step, clean up by one table.

Target -> ensure the cluster -> submit (deterministic submission id, re-attach rule in
:mod:`airflow_ray_provider.jobs`) -> wait (:func:`step`, driven by a blocking and an async transport) ->
collect -> clean up (:mod:`.cleanup`). Operators, the sensor and the triggers are thin Airflow shells over
it; the ``airflow-ray`` CLI is a terminal shell over it.
"""

from airflow_ray_provider.launch.cleanup import (
    Cleanup,
    CleanupActions,
    Ending,
    actions_for,
    from_on_kill,
    from_stop_on_kill,
    resolve_cleanup,
)
from airflow_ray_provider.launch.ray_job import (
    AsyncJobApi,
    JobApi,
    aobserve,
    await_job,
    event_for,
    finish,
    observe,
    wait_for_job,
)
from airflow_ray_provider.launch.rayjob import (
    TEARDOWN_WAIT_S,
    RayJobUsage,
    RayJobUsagePlan,
    RayJobWatch,
    await_rayjob,
    rayjob_plan,
    wait_for_rayjob,
)
from airflow_ray_provider.launch.runner import RunResult, job_spec, run
from airflow_ray_provider.launch.target import (
    JobApiTarget,
    KubeRayCluster,
    KubeRayJob,
    LocalHead,
    RayAddress,
    StandingCluster,
    Target,
)
from airflow_ray_provider.launch.transport import WaitOutcome, wait_async, wait_blocking
from airflow_ray_provider.launch.wait import Action, Observation, Step, WaitPlan, step

__all__ = [
    "TEARDOWN_WAIT_S",
    "Action",
    "AsyncJobApi",
    "Cleanup",
    "CleanupActions",
    "Ending",
    "JobApi",
    "JobApiTarget",
    "KubeRayCluster",
    "KubeRayJob",
    "LocalHead",
    "Observation",
    "RayAddress",
    "RayJobUsage",
    "RayJobUsagePlan",
    "RayJobWatch",
    "RunResult",
    "StandingCluster",
    "Step",
    "Target",
    "WaitOutcome",
    "WaitPlan",
    "actions_for",
    "aobserve",
    "await_job",
    "await_rayjob",
    "event_for",
    "finish",
    "from_on_kill",
    "from_stop_on_kill",
    "job_spec",
    "observe",
    "rayjob_plan",
    "resolve_cleanup",
    "run",
    "step",
    "wait_async",
    "wait_blocking",
    "wait_for_job",
    "wait_for_rayjob",
]

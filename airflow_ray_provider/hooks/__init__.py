"""Airflow hooks: the ``ray`` connection (Ray Job API) and the ``kuberay`` connection (Kubernetes API), and
which cluster backend or run target a task's arguments mean."""

from airflow_ray_provider.hooks.kuberay import (
    KubeRayHook,
    backend_for_connection,
    backend_for_handle,
    rayjobs_for_connection,
)
from airflow_ray_provider.hooks.ray_job import (
    RayJobHook,
    check_target_arguments,
    job_api_target,
    target_from_ref,
)

__all__ = [
    "KubeRayHook",
    "RayJobHook",
    "backend_for_connection",
    "backend_for_handle",
    "check_target_arguments",
    "job_api_target",
    "rayjobs_for_connection",
    "target_from_ref",
]

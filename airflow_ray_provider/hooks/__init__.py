"""Airflow hooks: the ``ray`` connection (Ray Job API) and the ``kuberay`` connection (Kubernetes API).

Besides the two hooks: which cluster backend a cluster connection or handle means (:mod:`.kuberay`), which
run target a task's arguments or a deferred run's reference mean (:mod:`.ray_job`), runtime_env checks.
"""

from airflow_ray_provider.hooks.kuberay import (
    KubeRayHook,
    backend_for_connection,
    backend_for_handle,
    rayjobs_for_connection,
)
from airflow_ray_provider.hooks.ray_job import (
    RayJobHook,
    check_target_arguments,
    client_of_connection,
    connection_link_url,
    emit_lines,
    handle_client,
    job_api_target,
    masked,
    target_from_ref,
    validate_runtime_env,
)

__all__ = [
    "KubeRayHook",
    "RayJobHook",
    "backend_for_connection",
    "backend_for_handle",
    "check_target_arguments",
    "client_of_connection",
    "connection_link_url",
    "emit_lines",
    "handle_client",
    "job_api_target",
    "masked",
    "rayjobs_for_connection",
    "target_from_ref",
    "validate_runtime_env",
]

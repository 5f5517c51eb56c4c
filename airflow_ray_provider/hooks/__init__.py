"""Airflow hooks: the ``ray`` connection (Ray Job API) and the ``kuberay`` connection (Kubernetes API).

Besides the two hooks: how a ``ray`` connection or a cluster handle becomes a :class:`RayApiConfig`,
the pure Job API helpers both transports share (:mod:`.ray_api`), the retry policy (:mod:`.retry`) and
which cluster backend a cluster connection or handle means (:mod:`.cluster_backend`).
"""

from airflow_ray_provider.hooks.cluster_backend import (
    abackend_for_connection,
    arayjobs_for_connection,
    backend_for_connection,
    backend_for_handle,
    rayjobs_for_connection,
)
from airflow_ray_provider.hooks.kuberay import KubeRayHook
from airflow_ray_provider.hooks.ray_connection import (
    RayApiConfig,
    config_from_connection,
    config_from_handle,
    read_handle_token,
)
from airflow_ray_provider.hooks.ray_job import RayJobHook, emit_lines
from airflow_ray_provider.hooks.retry import is_transient_ray_api_error, retry_kwargs
from airflow_ray_provider.hooks.runtime_env import validate_runtime_env

__all__ = [
    "KubeRayHook",
    "RayApiConfig",
    "RayJobHook",
    "abackend_for_connection",
    "arayjobs_for_connection",
    "backend_for_connection",
    "backend_for_handle",
    "config_from_connection",
    "config_from_handle",
    "emit_lines",
    "is_transient_ray_api_error",
    "rayjobs_for_connection",
    "read_handle_token",
    "retry_kwargs",
    "validate_runtime_env",
]

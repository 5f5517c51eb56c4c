"""Airflow hooks: the ``ray`` connection (Ray Job API) and the ``kuberay`` connection (Kubernetes API)."""

from airflow_ray_provider.hooks.kuberay import KubeRayHook
from airflow_ray_provider.hooks.ray_connection import RayApiConfig, config_from_connection, config_from_handle
from airflow_ray_provider.hooks.ray_job import RayJobHook
from airflow_ray_provider.hooks.retry import is_transient_ray_api_error, retry_kwargs

__all__ = [
    "KubeRayHook",
    "RayApiConfig",
    "RayJobHook",
    "config_from_connection",
    "config_from_handle",
    "is_transient_ray_api_error",
    "retry_kwargs",
]

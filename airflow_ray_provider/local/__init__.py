"""The local backend's client layer: ephemeral Ray heads on this machine (no Airflow import)."""

from airflow_ray_provider.local.cluster import (
    LocalClusterOptions,
    find_cluster,
    list_clusters,
    start_cluster,
    stop_cluster,
)
from airflow_ray_provider.local.head import (
    LocalHeadConfig,
    LocalHeadError,
    LocalHeadInfo,
    is_running,
    read_token,
    start_head,
    stop_head,
)

__all__ = [
    "LocalClusterOptions",
    "LocalHeadConfig",
    "LocalHeadError",
    "LocalHeadInfo",
    "find_cluster",
    "is_running",
    "list_clusters",
    "read_token",
    "start_cluster",
    "start_head",
    "stop_cluster",
    "stop_head",
]

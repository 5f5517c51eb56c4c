"""The local backend's client layer: ephemeral Ray heads on this machine (no Airflow import).

:mod:`.head` starts and stops one head (own process group and temp dir, token auth); :mod:`.cluster`
names heads, keeps a registry so any process can find and stop them, and knows their expiry.
"""

from airflow_ray_provider.local.cluster import (
    REGISTRY_ENV,
    LocalClusterOptions,
    find_cluster,
    is_record_expired,
    list_clusters,
    read_record,
    registry_dir,
    start_cluster,
    stop_cluster,
)
from airflow_ray_provider.local.head import (
    LocalHeadConfig,
    LocalHeadError,
    LocalHeadInfo,
    free_port,
    is_running,
    ray_executable,
    read_token,
    start_head,
    stop_head,
)

__all__ = [
    "REGISTRY_ENV",
    "LocalClusterOptions",
    "LocalHeadConfig",
    "LocalHeadError",
    "LocalHeadInfo",
    "find_cluster",
    "free_port",
    "is_record_expired",
    "is_running",
    "list_clusters",
    "ray_executable",
    "read_record",
    "read_token",
    "registry_dir",
    "start_cluster",
    "start_head",
    "stop_cluster",
    "stop_head",
]

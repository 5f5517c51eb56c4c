"""The local backend's client layer: ephemeral Ray heads on this machine (no Airflow import).

:mod:`.head` starts and stops one head; :mod:`.cluster` keeps the registry through which any process
finds and stops a head by name, and pools' leases.
"""

from airflow_ray_provider.local.cluster import (
    REGISTRY_ENV,
    LocalLeaseStore,
    find_cluster,
    list_clusters,
    read_record,
    registry_dir,
    start_cluster,
    stop_cluster,
)
from airflow_ray_provider.local.head import (
    LocalClusterOptions,
    LocalHeadConfig,
    LocalHeadError,
    LocalHeadInfo,
    agent_answers,
    free_port,
    is_running,
    read_token,
    start_head,
    stop_head,
    waiting_for,
)

__all__ = [
    "REGISTRY_ENV",
    "LocalClusterOptions",
    "LocalHeadConfig",
    "LocalHeadError",
    "LocalHeadInfo",
    "LocalLeaseStore",
    "agent_answers",
    "find_cluster",
    "free_port",
    "is_running",
    "list_clusters",
    "read_record",
    "read_token",
    "registry_dir",
    "start_cluster",
    "start_head",
    "stop_cluster",
    "stop_head",
    "waiting_for",
]

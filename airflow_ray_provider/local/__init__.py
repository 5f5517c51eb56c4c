"""The local backend's client layer: ephemeral Ray heads on this machine (no Airflow import).

:mod:`.head` starts one head (own session and temp dir, token auth) and :mod:`.running` finds and stops
it; :mod:`.cluster` names heads and keeps the registry through which any process finds and stops them,
and knows their expiry; :mod:`.leases` keeps the locks, records and leases of pools of heads.
``airflow-ray clusters list | delete NAME`` lists and stops them from a shell.
"""

from airflow_ray_provider.local.cluster import (
    REGISTRY_ENV,
    find_cluster,
    list_clusters,
    read_record,
    registry_dir,
    start_cluster,
    stop_cluster,
)
from airflow_ray_provider.local.head import (
    AGENT_HEALTH_PATH,
    LocalClusterOptions,
    LocalHeadConfig,
    LocalHeadError,
    agent_answers,
    free_port,
    read_token,
    start_head,
)
from airflow_ray_provider.local.leases import LocalLeaseStore
from airflow_ray_provider.local.running import LocalHeadInfo, is_running, stop_head

__all__ = [
    "AGENT_HEALTH_PATH",
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
]

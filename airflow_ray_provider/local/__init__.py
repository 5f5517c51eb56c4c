"""The local backend's client layer: one ephemeral Ray head on this machine, started, waited for and
stopped from any process (no Airflow import); the registry by name is the local backend's
(:mod:`airflow_ray_provider.clusters.local`).
"""

from airflow_ray_provider.local.head import (
    LocalClusterOptions,
    LocalHeadConfig,
    LocalHeadError,
    LocalHeadInfo,
    StartupCrashError,
    free_port,
    is_running,
    read_token,
    start_head,
    stop_head,
    wait_for_head,
    waiting_for,
)

__all__ = [
    "LocalClusterOptions",
    "LocalHeadConfig",
    "LocalHeadError",
    "LocalHeadInfo",
    "StartupCrashError",
    "free_port",
    "is_running",
    "read_token",
    "start_head",
    "stop_head",
    "wait_for_head",
    "waiting_for",
]

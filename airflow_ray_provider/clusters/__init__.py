"""Ray clusters behind one interface (:class:`ClusterBackend`, local and KubeRay), the handle every task
passes on, readiness, and pools (one cluster many runs share under leases). No Ray work runs here.
"""

from airflow_ray_provider.clusters.backend import (
    EVENT_ERROR,
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    RayClusterHandle,
    ReadinessCheck,
    ReadinessEvent,
    TaskIdentity,
    TokenRef,
    check_spec,
    event_for,
    make_event,
    probe_dashboard,
    validate_event,
)
from airflow_ray_provider.clusters.kuberay import KubeRayBackend, KubeRaySettings, cluster_link_url
from airflow_ray_provider.clusters.local import LocalBackend
from airflow_ray_provider.clusters.pool import (
    LeaseStore,
    PoolOptions,
    PoolRecord,
    PoolStep,
    decide,
    fingerprint,
    idle_expired,
    live_holders,
)
from airflow_ray_provider.kuberay import RayClusterSpec, RayJobOptions
from airflow_ray_provider.local import LocalClusterOptions

__all__ = [
    "EVENT_ERROR",
    "ClusterBackend",
    "ClusterPlan",
    "ClusterRequest",
    "KubeRayBackend",
    "KubeRaySettings",
    "LeaseStore",
    "LocalBackend",
    "LocalClusterOptions",
    "PoolOptions",
    "PoolRecord",
    "PoolStep",
    "RayClusterHandle",
    "RayClusterSpec",
    "RayJobOptions",
    "ReadinessCheck",
    "ReadinessEvent",
    "TaskIdentity",
    "TokenRef",
    "check_spec",
    "cluster_link_url",
    "decide",
    "event_for",
    "fingerprint",
    "idle_expired",
    "live_holders",
    "make_event",
    "probe_dashboard",
    "validate_event",
]

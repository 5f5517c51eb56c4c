"""Ray clusters behind one interface (:class:`ClusterBackend`, local and KubeRay), the handle every task
passes on, readiness, and where pools keep their leases (:class:`LeaseStore`). No Ray work runs here.
"""

from airflow_ray_provider.clusters.backend import (
    EVENT_ERROR,
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    LeaseStore,
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
    "RayClusterHandle",
    "RayClusterSpec",
    "RayJobOptions",
    "ReadinessCheck",
    "ReadinessEvent",
    "TaskIdentity",
    "TokenRef",
    "check_spec",
    "cluster_link_url",
    "event_for",
    "make_event",
    "probe_dashboard",
    "validate_event",
]

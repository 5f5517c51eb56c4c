"""Ray clusters behind one interface: the handle every task passes on, and the local and KubeRay backends.

:class:`ClusterBackend` is every step a cluster operator takes (plan, ensure, check, wait, handle, fail,
delete, delete by labels, list expired); :class:`LocalBackend` and :class:`KubeRayBackend` implement it.
Readiness is one typed look (:class:`ReadinessCheck`) and one event shape (:class:`ReadinessEvent`),
shared by the sync wait, the trigger and ``execute_complete``. No Ray work runs here, and nothing here
imports an operator: :mod:`airflow_ray_provider.hooks.cluster_backend` picks the backend for a
connection or a handle.
"""

from airflow_ray_provider.clusters.backend import (
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    TaskIdentity,
    TokenRef,
    check_spec,
)
from airflow_ray_provider.clusters.handle import BACKENDS, BackendName, RayClusterHandle
from airflow_ray_provider.clusters.kuberay import KubeRayBackend, KubeRayPlan, KubeRaySettings
from airflow_ray_provider.clusters.local import LocalBackend, LocalPlan, local_options_for
from airflow_ray_provider.clusters.readiness import (
    EVENT_ERROR,
    EVENT_FAILED,
    EVENT_READY,
    EVENT_STATUSES,
    EVENT_TIMEOUT,
    EventStatus,
    ReadinessCheck,
    ReadinessEvent,
    Verdict,
    event_for,
    make_event,
    probe_dashboard,
    timeout_message,
    validate_event,
    wait_until_ready,
)
from airflow_ray_provider.kuberay.spec import HeadGroup, RayClusterSpec, WorkerGroup
from airflow_ray_provider.local.cluster import LocalClusterOptions

__all__ = [
    "BACKENDS",
    "EVENT_ERROR",
    "EVENT_FAILED",
    "EVENT_READY",
    "EVENT_STATUSES",
    "EVENT_TIMEOUT",
    "BackendName",
    "ClusterBackend",
    "ClusterPlan",
    "ClusterRequest",
    "EventStatus",
    "HeadGroup",
    "KubeRayBackend",
    "KubeRayPlan",
    "KubeRaySettings",
    "LocalBackend",
    "LocalClusterOptions",
    "LocalPlan",
    "RayClusterHandle",
    "RayClusterSpec",
    "ReadinessCheck",
    "ReadinessEvent",
    "TaskIdentity",
    "TokenRef",
    "Verdict",
    "WorkerGroup",
    "check_spec",
    "event_for",
    "local_options_for",
    "make_event",
    "probe_dashboard",
    "timeout_message",
    "validate_event",
    "wait_until_ready",
]

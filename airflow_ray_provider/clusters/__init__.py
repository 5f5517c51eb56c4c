"""Ray clusters behind one interface: the handle every task passes on, and the local and KubeRay backends.

:class:`ClusterBackend` is every step a cluster operator takes; :class:`LocalBackend` and
:class:`KubeRayBackend` implement it (a KubeRay RayJob is a run target, :mod:`airflow_ray_provider.launch`).
Readiness is one look (:class:`ReadinessCheck`) and one event (:class:`ReadinessEvent`). No Ray work runs
here, and nothing imports an operator: :mod:`airflow_ray_provider.hooks.kuberay` picks the backend.
"""

from airflow_ray_provider.clusters.backend import (
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    RunCluster,
    TaskIdentity,
    TokenRef,
    check_spec,
    keeps_unowned,
)
from airflow_ray_provider.clusters.handle import BACKENDS, BackendName, RayClusterHandle
from airflow_ray_provider.clusters.kuberay import (
    KubeRayBackend,
    KubeRayPlan,
    KubeRaySettings,
    cluster_link_url,
)
from airflow_ray_provider.clusters.local import LocalBackend, LocalPlan, local_options_for
from airflow_ray_provider.clusters.readiness import (
    EVENT_ERROR,
    EVENT_READY,
    EVENT_STATUSES,
    EventStatus,
    ReadinessCheck,
    ReadinessEvent,
    Verdict,
    event_for,
    make_event,
    probe_dashboard,
    validate_event,
)
from airflow_ray_provider.kuberay import (
    DEFAULT_TTL_SECONDS,
    SUBMISSION_MODES,
    HeadGroup,
    RayClusterSpec,
    RayJobOptions,
    RayJobStatus,
    WorkerGroup,
)
from airflow_ray_provider.local import LocalClusterOptions

__all__ = [
    "BACKENDS",
    "DEFAULT_TTL_SECONDS",
    "EVENT_ERROR",
    "EVENT_READY",
    "EVENT_STATUSES",
    "SUBMISSION_MODES",
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
    "RayJobOptions",
    "RayJobStatus",
    "ReadinessCheck",
    "ReadinessEvent",
    "RunCluster",
    "TaskIdentity",
    "TokenRef",
    "Verdict",
    "WorkerGroup",
    "check_spec",
    "cluster_link_url",
    "event_for",
    "keeps_unowned",
    "local_options_for",
    "make_event",
    "probe_dashboard",
    "validate_event",
]

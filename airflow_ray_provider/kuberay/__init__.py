"""KubeRay client layer: RayCluster and RayJob CRs over the official ``kubernetes`` client (no Airflow).

The typed client (:mod:`.client`), the spec (:mod:`.spec`) and the body builder (:mod:`.builder`), the
typed status (:mod:`.status`) and events (:mod:`.events`), user manifests (:mod:`.manifest`), RayJobs
(:mod:`.rayjob`: client and typed status; :mod:`.rayjob_spec`: the body and KubeRay's rules), ownership
labels (:mod:`.labels`), field checks (:mod:`.validation`), KubeRay's controller rules
(:mod:`.controller_rules`), the RBAC Role (:mod:`.rbac`) and this layer's errors (:mod:`.errors`).
Importing it stays light: the ``kubernetes`` package is imported only when a client call needs it, so DAG
parsing never loads it.
"""

from airflow_ray_provider.kuberay.builder import TokenRef, build_body, token_ref_of, token_secret_name
from airflow_ray_provider.kuberay.client import KubeRayClient, is_transient
from airflow_ray_provider.kuberay.controller_rules import check_raycluster, kuberay_secret_name
from airflow_ray_provider.kuberay.errors import (
    KubeRayApiError,
    KubeRayConflictError,
    KubeRayError,
    KubeRayNotFoundError,
    KubeRaySpecError,
    KubeRayTimeoutError,
)
from airflow_ray_provider.kuberay.events import ClusterEvent
from airflow_ray_provider.kuberay.manifest import load_manifest, prepare_manifest
from airflow_ray_provider.kuberay.rayjob import RayJobClient, RayJobStatus
from airflow_ray_provider.kuberay.rayjob_spec import (
    SUBMISSION_MODES,
    RayJobOptions,
    build_rayjob_body,
    check_rayjob_name,
)
from airflow_ray_provider.kuberay.rbac import role_manifest
from airflow_ray_provider.kuberay.spec import (
    AUTH_MODES,
    HeadGroup,
    RayClusterSpec,
    WorkerGroup,
    generate_name,
    validate_spec,
)
from airflow_ray_provider.kuberay.status import ClusterStatus, Readiness, dashboard_url, readiness

__all__ = [
    "AUTH_MODES",
    "SUBMISSION_MODES",
    "ClusterEvent",
    "ClusterStatus",
    "HeadGroup",
    "KubeRayApiError",
    "KubeRayClient",
    "KubeRayConflictError",
    "KubeRayError",
    "KubeRayNotFoundError",
    "KubeRaySpecError",
    "KubeRayTimeoutError",
    "RayClusterSpec",
    "RayJobClient",
    "RayJobOptions",
    "RayJobStatus",
    "Readiness",
    "TokenRef",
    "WorkerGroup",
    "build_body",
    "build_rayjob_body",
    "check_raycluster",
    "check_rayjob_name",
    "dashboard_url",
    "generate_name",
    "is_transient",
    "kuberay_secret_name",
    "load_manifest",
    "prepare_manifest",
    "readiness",
    "role_manifest",
    "token_ref_of",
    "token_secret_name",
    "validate_spec",
]

"""KubeRay client layer: RayCluster and RayJob CRs over the official ``kubernetes`` client (no Airflow).

``kubernetes`` is imported only when a client call needs it, so DAG parsing never loads it.
"""

from airflow_ray_provider.kuberay.builder import TokenRef, build_body, prepare_manifest, token_ref_of
from airflow_ray_provider.kuberay.client import (
    ANNOTATION_RUN_ID,
    CREATED_BY,
    LABEL_CREATED_BY,
    LABEL_DAG_ID,
    LABEL_RUN_HASH,
    KubeRayApiError,
    KubeRayClient,
    KubeRayConflictError,
    KubeRayNotFoundError,
    KubeRayTimeoutError,
    RayJobClient,
    generate_name,
    is_expired,
    matches,
    ownership_annotations,
    ownership_labels,
    role_manifest,
    selector,
)
from airflow_ray_provider.kuberay.leases import KubeRayLeaseStore
from airflow_ray_provider.kuberay.rayjob import (
    DEFAULT_TTL_SECONDS,
    RayJobOptions,
    build_rayjob_body,
    validate_options,
)
from airflow_ray_provider.kuberay.spec import (
    AUTH_MODES,
    AUTH_TOKEN_KEY,
    RayClusterSpec,
)
from airflow_ray_provider.kuberay.status import (
    LABEL_ORIGINATED_FROM_CRD,
    ClusterEvent,
    ClusterStatus,
    RayJobStatus,
    dashboard_url,
    events_of,
    readiness,
    refusal_event,
    warning_summary,
)
from airflow_ray_provider.kuberay.validation import (
    KubeRaySpecError,
    check_cluster_name,
    check_name,
)

__all__ = [
    "ANNOTATION_RUN_ID",
    "AUTH_MODES",
    "AUTH_TOKEN_KEY",
    "CREATED_BY",
    "DEFAULT_TTL_SECONDS",
    "LABEL_CREATED_BY",
    "LABEL_DAG_ID",
    "LABEL_ORIGINATED_FROM_CRD",
    "LABEL_RUN_HASH",
    "ClusterEvent",
    "ClusterStatus",
    "KubeRayApiError",
    "KubeRayClient",
    "KubeRayConflictError",
    "KubeRayLeaseStore",
    "KubeRayNotFoundError",
    "KubeRaySpecError",
    "KubeRayTimeoutError",
    "RayClusterSpec",
    "RayJobClient",
    "RayJobOptions",
    "RayJobStatus",
    "TokenRef",
    "build_body",
    "build_rayjob_body",
    "check_cluster_name",
    "check_name",
    "dashboard_url",
    "events_of",
    "generate_name",
    "is_expired",
    "matches",
    "ownership_annotations",
    "ownership_labels",
    "prepare_manifest",
    "readiness",
    "refusal_event",
    "role_manifest",
    "selector",
    "token_ref_of",
    "validate_options",
    "warning_summary",
]

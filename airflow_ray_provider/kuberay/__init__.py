"""KubeRay client layer: RayCluster and RayJob CRs over the official ``kubernetes`` client (no Airflow).

:mod:`.spec` is the typed RayCluster spec and :mod:`.builder` the body, built from a spec (images, pods,
token Secret) or taken from a user's manifest; :mod:`.rayjob` builds RayJobs. :mod:`.validation` holds
what Kubernetes and KubeRay's controller refuse (and the base errors), :mod:`.status` what KubeRay reports
(status, events, RayJob status) and :mod:`.client` the clients, their API errors, the RBAC Role, and the
name, ownership labels and expiry that tie a cluster to its task; :mod:`.leases` keeps pools (a shared
cluster's lock, record and leases) in ``coordination.k8s.io`` Leases. Importing it stays light:
``kubernetes`` is imported only when a client call needs it, so DAG parsing never loads it.
"""

from airflow_ray_provider.kuberay.builder import TokenRef, build_body, prepare_manifest, token_ref_of
from airflow_ray_provider.kuberay.client import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_RUN_ID,
    BASE_RULES,
    CREATED_BY,
    LABEL_CREATED_BY,
    LABEL_DAG_ID,
    LABEL_RUN_HASH,
    LABEL_TASK_ID,
    KubeRayApiError,
    KubeRayClient,
    KubeRayConflictError,
    KubeRayNotFoundError,
    KubeRayTimeoutError,
    RayJobClient,
    expires_at,
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
    SUBMISSION_MODES,
    RayJobOptions,
    build_rayjob_body,
    validate_options,
)
from airflow_ray_provider.kuberay.spec import (
    AUTH_MODES,
    AUTH_TOKEN_KEY,
    HeadGroup,
    PodOptions,
    RayClusterSpec,
    WorkerGroup,
    validate_spec,
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
    KubeRayError,
    KubeRaySpecError,
    check_cluster_name,
    check_dns_label,
    check_rayjob_name,
)

__all__ = [
    "ANNOTATION_EXPIRES_AT",
    "ANNOTATION_RUN_ID",
    "AUTH_MODES",
    "AUTH_TOKEN_KEY",
    "BASE_RULES",
    "CREATED_BY",
    "DEFAULT_TTL_SECONDS",
    "LABEL_CREATED_BY",
    "LABEL_DAG_ID",
    "LABEL_ORIGINATED_FROM_CRD",
    "LABEL_RUN_HASH",
    "LABEL_TASK_ID",
    "SUBMISSION_MODES",
    "ClusterEvent",
    "ClusterStatus",
    "HeadGroup",
    "KubeRayApiError",
    "KubeRayClient",
    "KubeRayConflictError",
    "KubeRayError",
    "KubeRayLeaseStore",
    "KubeRayNotFoundError",
    "KubeRaySpecError",
    "KubeRayTimeoutError",
    "PodOptions",
    "RayClusterSpec",
    "RayJobClient",
    "RayJobOptions",
    "RayJobStatus",
    "TokenRef",
    "WorkerGroup",
    "build_body",
    "build_rayjob_body",
    "check_cluster_name",
    "check_dns_label",
    "check_rayjob_name",
    "dashboard_url",
    "events_of",
    "expires_at",
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
    "validate_spec",
    "warning_summary",
]

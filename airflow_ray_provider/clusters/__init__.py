"""Ray clusters as one interface: the handle every task passes on, and the local and KubeRay backends.

No Ray work runs here; the backends start, check and delete clusters.
"""

from airflow_ray_provider.clusters.backends import (
    ClusterRequest,
    KubeRayBackend,
    KubeRayPlan,
    TaskIdentity,
    create_local,
    delete_local,
    local_options_for,
)
from airflow_ray_provider.clusters.handle import InvalidClusterHandleError, RayClusterHandle

__all__ = [
    "ClusterRequest",
    "InvalidClusterHandleError",
    "KubeRayBackend",
    "KubeRayPlan",
    "RayClusterHandle",
    "TaskIdentity",
    "create_local",
    "delete_local",
    "local_options_for",
]

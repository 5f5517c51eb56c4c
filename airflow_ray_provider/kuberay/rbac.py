"""The namespaced RBAC Role the provider needs; nothing cluster-wide, never the KubeRay operator itself."""

from __future__ import annotations

import copy
from typing import Any

# RayCluster verbs for create / wait / delete / janitor / attach to a standing cluster, RayJob verbs for
# create / wait / re-attach / suspend (patch) / delete, reading the token Secret KubeRay generates, and
# reading the cluster's events (KubeRay refuses an invalid RayCluster only by a Warning event).
BASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["create", "get", "list", "delete"]},
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayjobs"],
        "verbs": ["create", "get", "list", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list"]},
]
# Only for ``auth="secret"`` (KubeRay without ``authOptions``): the provider creates and deletes the Secret.
SECRET_MODE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"]},
]


def role_manifest(namespace: str, *, name: str = "airflow-ray-provider", secret_mode: bool = False) -> dict:
    """The ``rbac.authorization.k8s.io/v1`` Role to bind to Airflow's service account in ``namespace``."""
    rules = copy.deepcopy(BASE_RULES) + (copy.deepcopy(SECRET_MODE_RULES) if secret_mode else [])
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": rules,
    }


def allowed(rules: list[dict[str, Any]], *, group: str, resource: str, verb: str) -> bool:
    """Whether ``rules`` grant ``verb`` on ``group``/``resource``."""
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )

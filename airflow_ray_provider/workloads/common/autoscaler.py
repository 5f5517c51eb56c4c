"""Whether the connected Ray cluster has an autoscaler that can add nodes.

Ray's autoscaler monitor publishes its status under one key of the cluster's internal key-value store.
Every head runs that monitor, but a cluster nobody configured to scale (``ray start --head``, a
test head) runs it with Ray's *read-only* provider, whose node types are named ``node_<id>``; a
cluster whose autoscaler reports node types of its own (KubeRay's worker groups) can grow.
"""

from __future__ import annotations

import json
from typing import Any

#: The internal-KV key Ray's autoscaler writes its status to (``ray._private.ray_constants``).
AUTOSCALER_STATUS_KEY = b"__autoscaling_status"
#: How Ray's read-only provider names the node types of a cluster nobody configured to scale.
READONLY_TYPE_PREFIX = "node_"


def autoscaling() -> bool:
    """Whether an autoscaler that can add nodes runs on the connected cluster (see the module docstring)."""
    from ray.experimental import internal_kv

    try:
        raw = internal_kv._internal_kv_get(AUTOSCALER_STATUS_KEY)
        return scales_from_status(json.loads(raw) if raw else {})
    except Exception:  # a Ray without that store or format: assume none, the fast (refusing) answer
        return False


def scales_from_status(status: dict[str, Any]) -> bool:
    """Whether an autoscaler status names node types of its own (not the read-only ``node_<id>``; pure)."""
    report = status.get("autoscaler_report") or {}
    types = {
        *(report.get("active_nodes") or {}),
        *(report.get("idle_nodes") or {}),
        *(report.get("pending_launches") or {}),
    }
    return any(not str(t).startswith(READONLY_TYPE_PREFIX) for t in types)

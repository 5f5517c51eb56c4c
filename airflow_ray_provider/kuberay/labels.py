"""What ties a cluster to the task that created it: its per-task name, ownership labels and expiry.

A retried task finds its cluster by the name; a janitor finds orphans by the labels and deletes them once
the expiry annotation has passed. Label values are limited to 63 characters of ``[A-Za-z0-9._-]``, so a
run id (``manual__2024-01-01T00:00:00+00:00``) is stored as a short hash, and in full in an annotation.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_ray_provider.kuberay.validation import check_cluster_name

CREATED_BY = "airflow-ray-provider"
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
LABEL_DAG_ID = "airflow-ray-provider/dag-id"
LABEL_RUN_HASH = "airflow-ray-provider/run-hash"
LABEL_TASK_ID = "airflow-ray-provider/task-id"
ANNOTATION_EXPIRES_AT = "airflow-ray-provider/expires-at"
ANNOTATION_RUN_ID = "airflow-ray-provider/run-id"
GENERATED_NAME_MAX = 40  # KubeRay derives longer names (services, pods) from it; keep headroom under 63

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def _short_hash(text: str, length: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 chars, alphanumeric at both ends); long values keep a hash."""
    value = _LABEL_VALUE_BAD.sub("-", text).strip("-_.")
    if len(value) > 63:
        value = f"{value[:52].rstrip('-_.')}-{_short_hash(text)}"
    return value


def generate_name(*, prefix: str, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """A DNS-1035 name, stable for one task of one run (retries find the same cluster), unique across runs.

    :param prefix: leading part, starts with a letter (e.g. ``ray``).
    """
    digest = _short_hash(f"{dag_id}\x00{run_id}\x00{task_id}\x00{map_index}")
    slug = re.sub(r"[^a-z0-9]+", "-", f"{prefix}-{dag_id}".lower()).strip("-")
    name = f"{slug[: GENERATED_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"
    check_cluster_name(name)
    return name


def ownership_labels(*, dag_id: str, run_id: str, task_id: str) -> dict[str, str]:
    """Labels that mark a cluster as created by this provider for one task of one DAG run."""
    return {
        LABEL_CREATED_BY: CREATED_BY,
        LABEL_DAG_ID: _label_value(dag_id),
        LABEL_RUN_HASH: _short_hash(run_id),
        LABEL_TASK_ID: _label_value(task_id),
    }


def ownership_annotations(*, run_id: str, expires_at: datetime) -> dict[str, str]:
    """Annotations with the full run id and the time (RFC 3339 UTC) after which a janitor may delete it."""
    expiry = expires_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {ANNOTATION_RUN_ID: run_id, ANNOTATION_EXPIRES_AT: expiry}


def selector(labels: dict[str, str]) -> str:
    """Render labels as an equality label selector (``a=b,c=d``)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def matches(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether an object's labels include every ``labels`` item (client-side selector filtering)."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def is_expired(obj: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether an object's expiry annotation has passed (no valid annotation: it never expires)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EXPIRES_AT)
    try:
        expiry = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:  # none, or not a time
        return False
    expiry = expiry if expiry.tzinfo else expiry.replace(tzinfo=timezone.utc)
    return expiry <= (now or datetime.now(timezone.utc))


def expires_at(ttl: timedelta, now: datetime | None = None) -> datetime:
    """The expiry time ``ttl`` from ``now``."""
    return (now or datetime.now(timezone.utc)) + ttl

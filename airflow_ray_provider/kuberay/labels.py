"""Ownership labels and the expiry annotation that let a janitor find orphaned clusters.

Label values are limited to 63 characters of ``[A-Za-z0-9._-]``; a run id
(``manual__2024-01-01T00:00:00+00:00``) is not a valid value, so it is stored as a short hash.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta, timezone
from typing import Any

CREATED_BY = "airflow-ray-provider"
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
LABEL_DAG_ID = "airflow-ray-provider/dag-id"
LABEL_RUN_HASH = "airflow-ray-provider/run-hash"
LABEL_TASK_ID = "airflow-ray-provider/task-id"
ANNOTATION_EXPIRES_AT = "airflow-ray-provider/expires-at"
ANNOTATION_RUN_ID = "airflow-ray-provider/run-id"
OWNERSHIP_LABELS = (LABEL_CREATED_BY, LABEL_DAG_ID, LABEL_RUN_HASH, LABEL_TASK_ID)

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def short_hash(text: str, length: int = 10) -> str:
    """Return a stable lowercase hex digest prefix of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def label_value(text: str) -> str:
    """Make ``text`` a valid label value (<= 63 chars, alphanumeric at both ends); long values keep a hash."""
    value = _LABEL_VALUE_BAD.sub("-", text).strip("-_.")
    if len(value) > 63:
        value = f"{value[:52].rstrip('-_.')}-{short_hash(text)}"
    return value


def ownership_labels(*, dag_id: str, run_id: str, task_id: str) -> dict[str, str]:
    """Labels that mark a cluster as created by this provider for one task of one DAG run."""
    return {
        LABEL_CREATED_BY: CREATED_BY,
        LABEL_DAG_ID: label_value(dag_id),
        LABEL_RUN_HASH: short_hash(run_id),
        LABEL_TASK_ID: label_value(task_id),
    }


def ownership_annotations(*, run_id: str, expires_at: datetime) -> dict[str, str]:
    """Annotations with the full run id and the time after which a janitor may delete the cluster."""
    return {ANNOTATION_RUN_ID: run_id, ANNOTATION_EXPIRES_AT: format_time(expires_at)}


def selector(labels: dict[str, str]) -> str:
    """Render labels as an equality label selector (``a=b,c=d``)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def matches(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether an object's labels include every ``labels`` item (client-side selector filtering)."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def format_time(moment: datetime) -> str:
    """Format an aware datetime as RFC 3339 UTC (``2024-01-01T00:00:00Z``)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def expiry_of(obj: dict[str, Any]) -> datetime | None:
    """The cluster's expiry time, or ``None`` when it has no (valid) expiry annotation."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EXPIRES_AT)
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def is_expired(obj: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether a provider-created cluster's expiry has passed (clusters without expiry never expire)."""
    expiry = expiry_of(obj)
    return expiry is not None and expiry <= (now or datetime.now(timezone.utc))


def expires_at(ttl: timedelta, now: datetime | None = None) -> datetime:
    """The expiry time ``ttl`` from ``now``."""
    return (now or datetime.now(timezone.utc)) + ttl

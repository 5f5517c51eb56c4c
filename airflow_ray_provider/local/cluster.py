"""The local backend's cluster lifecycle: named ephemeral heads with ownership labels and an expiry.

A small registry (one JSON file per cluster, no secrets) lets a retried task find the head its earlier try
started, lets a teardown task in another process stop it, and lets the janitor find expired ones.
No Airflow imports.

A head is registered the moment its process group exists, *before* the wait for it to come up (a wait
of 6-40 s): a task killed during that wait leaves a ``starting`` record, so its rerun adopts the head
instead of starting a second one, and the janitor can stop it. A ``starting`` record expires when the
wait would have ended (``ready_timeout``), not after the cluster's full lifetime; it gets that lifetime
once the head is up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_ray_provider.local.head import (
    LocalHeadConfig,
    LocalHeadError,
    LocalHeadInfo,
    StartupCrashError,
    is_running,
    start_head,
    stop_head,
    wait_for_head,
)

log = logging.getLogger(__name__)

REGISTRY_ENV = "AIRFLOW_RAY_LOCAL_REGISTRY"
#: Record states: registered before the wait for the head (``starting``), and once it is up (``ready``).
STARTING, READY = "starting", "ready"


@dataclass(frozen=True)
class LocalClusterOptions:
    """Options of the local backend (the KubeRay spec is summarised into ``num_cpus`` when unset).

    :param num_cpus: logical CPUs the head offers (``None``: from the spec, else every core).
    :param num_gpus: logical GPUs (``None``: Ray detects them).
    :param object_store_memory: object store bytes (``None``: Ray's default).
    :param resources: extra custom resources.
    :param env: extra environment for the head and its workers.
    :param temp_root: parent folder of the head's temp dir (keep it short).
    :param ready_timeout: seconds to wait for the dashboard.
    """

    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_memory: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    temp_root: str | None = None
    ready_timeout: float = 120.0

    @classmethod
    def from_value(cls, value: LocalClusterOptions | dict[str, Any] | None) -> LocalClusterOptions:
        """Accept options, a dict of them, or ``None``; unknown keys raise ``ValueError``."""
        if isinstance(value, LocalClusterOptions):
            return value
        value = dict(value or {})
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"local options has unknown key(s) {unknown}; known: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**value)


def registry_dir() -> Path:
    """Folder of the registry (``$AIRFLOW_RAY_LOCAL_REGISTRY``, default ``<tmp>/airflow-ray-local-<uid>``).

    Only registering a head creates it (mode 0700): looking a name up in a registry that does not exist
    finds nothing and leaves nothing behind.
    """
    default = Path(tempfile.gettempdir(), f"airflow-ray-local-{os.getuid()}")
    return Path(os.environ.get(REGISTRY_ENV) or default)


def _record_path(name: str) -> Path:
    return registry_dir() / f"{name}.json"


def _write_record(record: dict[str, Any]) -> None:
    path = _record_path(record["info"]["name"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, path)


def read_record(name: str) -> dict[str, Any] | None:
    """The registry record of a cluster (``info``, ``labels``, ``expires_at``), or ``None``."""
    try:
        return json.loads(_record_path(name).read_text())
    except (OSError, ValueError):
        return None


def find_cluster(name: str) -> LocalHeadInfo | None:
    """The running head registered under ``name``, or ``None`` (a dead one's record is removed)."""
    record = read_record(name)
    if record is None:
        return None
    info = LocalHeadInfo.from_dict(record["info"])
    if is_running(info):
        return info
    stop_cluster(info)  # clean up what a dead head left (temp dir, record)
    return None


def start_cluster(
    name: str,
    options: LocalClusterOptions,
    *,
    auth: bool = True,
    labels: dict[str, str] | None = None,
    expires_at: datetime | None = None,
    owner: dict[str, str] | None = None,
) -> tuple[LocalHeadInfo, bool]:
    """Start (or find, on a retry) the head named ``name``; it is registered before the wait for it.

    A head an earlier try left ``starting`` (that try was killed while it waited) is adopted: waited for
    here, not started twice.

    :param owner: who started it (``dag_id``, ``run_id``), kept in the record for the janitor.
    :returns: the head's info and whether it was created now (``False``: reused).
    :raises LocalHeadError: when the head does not come up (it is stopped and unregistered).
    """
    record = {"labels": dict(labels or {}), "expires_at": _iso(expires_at), "owner": dict(owner or {})}
    existing = find_cluster(name)
    if existing is not None:
        if (read_record(name) or {}).get("state", READY) != STARTING:
            log.info("Reusing local Ray head %s (pid %s) started by an earlier try", name, existing.pid)
            return existing, False
        if _adopt(existing, options.ready_timeout):
            _write_record({**record, "info": existing.to_dict(), "state": READY})
            return existing, False
    config = LocalHeadConfig(
        num_cpus=options.num_cpus,
        num_gpus=options.num_gpus,
        object_store_memory=options.object_store_memory,
        resources=dict(options.resources),
        auth=auth,
        temp_root=options.temp_root,
        env=dict(options.env),
        ready_timeout=options.ready_timeout,
    )

    def register(info: LocalHeadInfo) -> None:
        wait_ends = datetime.now(timezone.utc) + timedelta(seconds=options.ready_timeout)
        expiry = min(expires_at, wait_ends) if expires_at else wait_ends
        _write_record({**record, "info": info.to_dict(), "state": STARTING, "expires_at": _iso(expiry)})

    try:
        info = start_head(config, name=name, on_spawn=register)
    except LocalHeadError:
        _unregister(name)  # start_head stopped the head it started
        raise
    try:
        _write_record({**record, "info": info.to_dict(), "state": READY})
    except OSError:
        stop_cluster(info)
        raise
    return info, True


def _adopt(info: LocalHeadInfo, timeout: float) -> bool:
    """Wait for a head an earlier (killed) try left ``starting``.

    :returns: ``True`` once it is up; ``False`` when ``ray start`` gave up during startup (it is stopped
        and unregistered; the caller starts a fresh head, as :func:`start_head` does on its own crashes).
    :raises LocalHeadError: when it does not come up in time (it is stopped and unregistered).
    """
    log.info("Adopting local Ray head %s (pid %s): an earlier try started it", info.name, info.pid)
    try:
        wait_for_head(info, timeout)
    except StartupCrashError as exc:
        log.warning("The adopted head %s gave up during startup; starting a fresh one. %s", info.name, exc)
        stop_cluster(info)
        return False
    except LocalHeadError:
        stop_cluster(info)
        raise
    return True


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(timezone.utc).isoformat() if moment else None


def _unregister(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _record_path(name).unlink()


def stop_cluster(info: LocalHeadInfo) -> bool:
    """Stop a head (from any process) and drop its record; ``False`` when it was already gone."""
    stopped = stop_head(info)
    _unregister(info.name)
    return stopped


def list_clusters(labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Registry records whose labels include ``labels``."""
    found = []
    for path in sorted(registry_dir().glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if all(record.get("labels", {}).get(k) == x for k, x in (labels or {}).items()):
                found.append(record)
    return found


def is_record_expired(record: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether a record's expiry has passed (records without expiry never expire)."""
    raw = record.get("expires_at")
    if not raw:
        return False
    return datetime.fromisoformat(raw) <= (now or datetime.now(timezone.utc))

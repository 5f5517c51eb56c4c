"""Named local heads: a registry any process reads, with ownership labels and an expiry (no Airflow).

One JSON file per head (no secrets) lets a retried task find the head its earlier try started, a
teardown task in another process stop it, and the janitor find expired ones. A head is registered
(``starting``) once its process exists and before Ray starts in it, so whatever interrupts its start
leaves a head that :func:`find_cluster` finds and :func:`stop_cluster` stops, and a rerun adopts it
instead of starting a second one. A ``starting`` record expires when the wait for its head would have
ended; once the head is up it gets the cluster's expiry. Only registering creates the registry's folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_ray_provider.local.head import (
    LocalClusterOptions,
    LocalHeadConfig,
    LocalHeadError,
    StartupCrashError,
    start_head,
    wait_for_head,
)
from airflow_ray_provider.local.running import LocalHeadInfo, is_running, stop_head

log = logging.getLogger(__name__)

REGISTRY_ENV = "AIRFLOW_RAY_LOCAL_REGISTRY"
#: Record states: registered before the wait for the head (``starting``), and once it is up (``ready``).
STARTING, READY = "starting", "ready"


def registry_dir() -> Path:
    """Folder of the registry (``$AIRFLOW_RAY_LOCAL_REGISTRY``, default ``<tmp>/airflow-ray-local-<uid>``)."""
    default = Path(tempfile.gettempdir(), f"airflow-ray-local-{os.getuid()}")
    return Path(os.environ.get(REGISTRY_ENV) or default)


def _record_path(name: str) -> Path:
    return registry_dir() / f"{name}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a unique temporary file renamed over it): a reader never
    sees half a file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` when it is missing or not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_record(record: dict[str, Any]) -> None:
    write_json(_record_path(record["info"]["name"]), record)


def read_record(name: str) -> dict[str, Any] | None:
    """The registry record of a cluster (``info``, ``labels``, ``expires_at``, ``state``), or ``None``."""
    return read_json(_record_path(name))


def find_cluster(name: str) -> LocalHeadInfo | None:
    """The running head registered under ``name``, or ``None`` (a dead head's record and files go)."""
    record = read_record(name)
    if record is None:
        return None
    info = LocalHeadInfo.from_dict(record["info"])
    if is_running(info):
        return info
    stop_cluster(info)
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
    """Start the head named ``name`` (registered before the wait for it), or find it on a retry; a head an
    earlier, killed try left ``starting`` is adopted: waited for here, not started twice.

    :param owner: who started it (``dag_id``, ``run_id``), for the janitor.
    :returns: the head's info and whether it was created now.
    :raises LocalHeadError: when the head does not come up (it is stopped and unregistered).
    """
    record = {"labels": dict(labels or {}), "owner": dict(owner or {}), "expires_at": _iso(expires_at)}
    existing = find_cluster(name)
    if existing is not None:
        if (read_record(name) or {}).get("state", READY) != STARTING:
            log.info("Reusing local Ray head %s (pid %s) started by an earlier try", name, existing.pid)
            return existing, False
        if _adopt(existing, options.ready_timeout):
            _write_record({**record, "info": existing.to_dict(), "state": READY})
            return existing, False

    def register(info: LocalHeadInfo) -> None:
        wait_ends = datetime.now(timezone.utc) + timedelta(seconds=options.ready_timeout)
        expiry = min(expires_at, wait_ends) if expires_at else wait_ends
        _write_record({**record, "info": info.to_dict(), "state": STARTING, "expires_at": _iso(expiry)})

    try:
        info = start_head(LocalHeadConfig(**{**asdict(options), "auth": auth}), name=name, on_spawn=register)
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
    """Wait for a head an earlier (killed) try left ``starting``: ``True`` once it is up, ``False`` when
    ``ray start`` gave up during startup (the caller starts a fresh one). A head that is not up in time
    raises :class:`LocalHeadError`; either way a failed head is stopped and unregistered."""
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
    records = [read_record(path.stem) for path in sorted(registry_dir().glob("*.json"))]
    wanted = (labels or {}).items()
    return [r for r in records if r is not None and all(r.get("labels", {}).get(k) == x for k, x in wanted)]

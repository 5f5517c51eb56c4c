"""Named local heads and pools' leases: a registry of JSON files any process reads (no Airflow).

One file per head (labels, owner, expiry; no secrets) lets a retried task find the head its earlier try
started, a teardown task in another process stop it, and the janitor find expired ones. A head is
registered (``starting``) before Ray starts in it, so an interrupted start leaves a head others find and
stop and a rerun adopts. Only registering creates the registry's folder. Pools keep their lock, record and
leases in ``pools/<pool>/`` (:class:`LocalLeaseStore`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow_ray_provider.local.head import (
    LocalClusterOptions,
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


def registry_dir() -> Path:
    """Folder of the registry (``$AIRFLOW_RAY_LOCAL_REGISTRY``, default ``<tmp>/airflow-ray-local-<uid>``)."""
    default = Path(tempfile.gettempdir(), f"airflow-ray-local-{os.getuid()}")
    return Path(os.environ.get(REGISTRY_ENV) or default)


def _record_path(name: str) -> Path:
    return registry_dir() / f"{name}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it: a reader never sees half."""
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
    """Start the head ``name``, or find it on a retry (one a killed try left ``starting`` is waited for,
    not started twice); ``owner`` (``dag_id``, ``run_id``) is for the janitor. Returns the info and whether
    it was created now; :class:`LocalHeadError`: it did not come up (stopped and unregistered)."""
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
        _record_path(name).unlink(missing_ok=True)  # start_head stopped the head it started
        raise
    try:
        _write_record({**record, "info": info.to_dict(), "state": READY})
    except OSError:
        stop_cluster(info)
        raise
    return info, True


def _adopt(info: LocalHeadInfo, timeout: float) -> bool:
    """Wait for a head a killed try left ``starting``: ``True`` once up, ``False`` when its start crashed
    (start a fresh one); late: :class:`LocalHeadError`. A failed head is stopped and unregistered."""
    log.info("Adopting local Ray head %s (pid %s): an earlier try started it", info.name, info.pid)
    try:
        wait_for_head(info, timeout)
    except LocalHeadError as exc:
        stop_cluster(info)
        if not isinstance(exc, StartupCrashError):
            raise
        log.warning("The adopted head %s gave up during startup; starting a fresh one. %s", info.name, exc)
        return False
    return True


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(timezone.utc).isoformat() if moment else None


def stop_cluster(info: LocalHeadInfo) -> bool:
    """Stop a head (from any process) and drop its record; ``False`` when it was already gone."""
    stopped = stop_head(info)
    _record_path(info.name).unlink(missing_ok=True)
    return stopped


def list_clusters(labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Registry records whose labels include ``labels``."""
    records = [read_record(path.stem) for path in sorted(registry_dir().glob("*.json"))]
    wanted = (labels or {}).items()
    return [r for r in records if r is not None and all(r.get("labels", {}).get(k) == x for k, x in wanted)]


#: Seconds between tries of a lock another holder has.
LOCK_RETRY_S = 0.05


class LocalLeaseStore:
    """This machine's pools: ``<root>/<pool>/`` holds ``lock`` (an ``flock``, dropped by the OS when its
    holder dies; never removed, a waiter holds it open), ``record.json`` and ``leases/<holder>.json`` (one
    per holder, so renewing needs no lock); ``root`` defaults to ``pools/`` in the registry."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or registry_dir() / "pools"

    def _folder(self, pool: str) -> Path:
        return self.root / pool

    def _lease_path(self, pool: str, holder: str) -> Path:
        return self._folder(pool) / "leases" / f"{quote(holder, safe='')}.json"

    @contextlib.contextmanager
    def lock(self, pool: str, *, timeout: float) -> Iterator[None]:
        """Hold the pool's lock; ``TimeoutError`` after ``timeout`` seconds."""
        folder = self._folder(pool)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        held = f"pool {pool!r}: its lock is still held after {timeout:g} s"
                        raise TimeoutError(held) from None
                    time.sleep(LOCK_RETRY_S)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def read(self, pool: str) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """The pool's record (``None``: none) and every lease's expiry, expired ones too."""
        leases: dict[str, float] = {}
        for path in sorted((self._folder(pool) / "leases").glob("*.json")):
            lease = read_json(path)
            if lease is not None:
                leases[str(lease["holder"])] = float(lease["expires"])
        return read_json(self._folder(pool) / "record.json"), leases

    def write(self, pool: str, record: dict[str, Any] | None) -> None:
        """Replace the pool's record; ``None`` forgets the pool and its leases (the lock file stays)."""
        if record is not None:
            write_json(self._folder(pool) / "record.json", record)
            return
        for path in (self._folder(pool) / "leases").glob("*.json"):
            path.unlink(missing_ok=True)
        (self._folder(pool) / "record.json").unlink(missing_ok=True)

    def renew(self, pool: str, holder: str, expires: float) -> None:
        """Take or renew ``holder``'s lease until ``expires`` (epoch seconds)."""
        write_json(self._lease_path(pool, holder), {"holder": holder, "expires": expires})

    def release(self, pool: str, holder: str) -> None:
        """End ``holder``'s lease (nothing if it has none)."""
        self._lease_path(pool, holder).unlink(missing_ok=True)

    def pools(self) -> list[str]:
        """Every pool with a record."""
        return sorted(path.parent.name for path in self.root.glob("*/record.json"))

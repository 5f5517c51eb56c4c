"""The local backend: ephemeral Ray heads on this machine, found by name in a registry of JSON files (no
secrets); a head is registered (``starting``) before Ray starts in it, so an interrupted start is found.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow_ray_provider.clusters.backend import (
    BackendName,
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    RayClusterHandle,
    ReadinessCheck,
    RunCluster,
    TaskIdentity,
    check_spec,
)
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.kuberay import CREATED_BY, LABEL_CREATED_BY
from airflow_ray_provider.local import (
    LocalHeadConfig,
    LocalHeadError,
    LocalHeadInfo,
    StartupCrashError,
    is_running,
    read_token,
    start_head,
    stop_head,
    wait_for_head,
    waiting_for,
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


def read_record(name: str) -> dict[str, Any] | None:
    """The registry record of a cluster (``info``, ``labels``, ``expires_at``, ``state``), or ``None``."""
    return read_json(_record_path(name))


def find_cluster(name: str) -> LocalHeadInfo | None:
    """The running head registered under ``name``, or ``None`` (a dead head's record and files go)."""
    record = read_record(name)
    info = LocalHeadInfo.from_dict(record["info"]) if record else None
    if info is None or is_running(info):
        return info
    stop_cluster(info)
    return None


@dataclass(frozen=True)
class LocalPlan(ClusterPlan):
    """A local head to start: its options and token auth, expiry and the DAG run that starts it."""

    config: LocalHeadConfig = field(default_factory=LocalHeadConfig)
    expires_at: datetime | None = None
    owner: dict[str, str] = field(default_factory=dict)


def start_cluster(plan: LocalPlan) -> tuple[LocalHeadInfo, bool]:
    """Start the plan's head, or find it on a retry (one a killed try left ``starting`` is waited for, not
    started twice; one whose start crashed is replaced); ``owner`` (``dag_id``, ``run_id``) is for the
    janitor. Returns the info and whether it was created now; :class:`LocalHeadError`: it did not come up
    (stopped and unregistered)."""
    name, options = plan.name, plan.config

    def register(info: LocalHeadInfo, state: str = READY) -> None:
        expiry = plan.expires_at
        if state == STARTING:  # the janitor may stop a head whose start was abandoned once its wait is over
            wait_ends = datetime.now(timezone.utc) + timedelta(seconds=options.ready_timeout)
            expiry = min(expiry, wait_ends) if expiry else wait_ends
        expires_at = expiry.astimezone(timezone.utc).isoformat() if expiry else None
        record = {"info": asdict(info), "labels": plan.labels, "owner": plan.owner, "state": state}
        write_json(_record_path(name), {**record, "expires_at": expires_at})

    existing = find_cluster(name)
    if existing is not None and (read_record(name) or {}).get("state", READY) != STARTING:
        log.info("Reusing local Ray head %s (pid %s) started by an earlier try", name, existing.pid)
        return existing, False
    if existing is not None:
        log.info("Adopting local Ray head %s (pid %s): an earlier try started it", name, existing.pid)
        try:
            wait_for_head(existing, options.ready_timeout)
            register(existing)
            return existing, False
        except LocalHeadError as exc:
            stop_cluster(existing)
            if not isinstance(exc, StartupCrashError):
                raise
            log.warning("The adopted head %s gave up during startup; starting a fresh one. %s", name, exc)
    try:
        info = start_head(options, name=name, on_spawn=partial(register, state=STARTING))
    except LocalHeadError:
        _record_path(name).unlink(missing_ok=True)  # start_head stopped the head it started
        raise
    try:
        register(info)
    except OSError:
        stop_cluster(info)
        raise
    return info, True


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

    def _lease_path(self, pool: str, holder: str) -> Path:
        return self.root / pool / "leases" / f"{quote(holder, safe='')}.json"

    @contextlib.contextmanager
    def lock(self, pool: str, *, timeout: float) -> Iterator[None]:
        """Hold the pool's lock; ``TimeoutError`` after ``timeout`` seconds."""
        folder = self.root / pool
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
        for path in sorted((self.root / pool / "leases").glob("*.json")):
            lease = read_json(path)
            if lease is not None:
                leases[str(lease["holder"])] = float(lease["expires"])
        return read_json(self.root / pool / "record.json"), leases

    def write(self, pool: str, record: dict[str, Any] | None) -> None:
        """Replace the pool's record; ``None`` forgets the pool and its leases (the lock file stays)."""
        if record is not None:
            write_json(self.root / pool / "record.json", record)
            return
        for path in (self.root / pool / "leases").glob("*.json"):
            path.unlink(missing_ok=True)
        (self.root / pool / "record.json").unlink(missing_ok=True)

    def renew(self, pool: str, holder: str, expires: float) -> None:
        """Take or renew ``holder``'s lease until ``expires`` (epoch seconds)."""
        write_json(self._lease_path(pool, holder), {"holder": holder, "expires": expires})

    def release(self, pool: str, holder: str) -> None:
        """End ``holder``'s lease (nothing if it has none)."""
        self._lease_path(pool, holder).unlink(missing_ok=True)

    def pools(self) -> list[str]:
        """Every pool with a record."""
        return sorted(path.parent.name for path in self.root.glob("*/record.json"))


def _handle_of(info: LocalHeadInfo | dict[str, Any], expires_at: str | None = None) -> RayClusterHandle:
    """The handle of a head (a listed one's ``extra`` has its ``expires_at`` too, for ``clusters list``)."""
    info = LocalHeadInfo.from_dict(info) if isinstance(info, dict) else info
    extra = {**asdict(info), "expires_at": expires_at} if expires_at else asdict(info)
    return RayClusterHandle(
        backend="local", name=info.name, dashboard_url=info.dashboard_url, auth_token_file=info.token_file,
        extra=extra,
    )  # fmt: skip


class LocalBackend(ClusterBackend):
    """Ephemeral Ray heads on this machine: started within the task, never deferred."""

    kind: BackendName = "local"
    conn_id: str | None = None
    can_defer: bool = False

    def plan(self, request: ClusterRequest, identity: TaskIdentity) -> LocalPlan:
        """Validate the name and the spec (the local head honours its CPUs, GPUs and auth); unless set,
        ``num_cpus`` is the spec's head and workers' CPUs (capped at this machine's cores) and ``num_gpus`` 0
        when the spec asks for none."""
        name, options, spec = request.name_for(identity), request.local_options, request.spec
        if spec is not None:
            check_spec(spec)
            cores = max(1, min(os.cpu_count() or 1, math.ceil(spec.total_cpus)))
            cpus = options.num_cpus if options.num_cpus is not None else cores
            gpus = options.num_gpus if options.num_gpus is not None else (0 if spec.total_gpus == 0 else None)
            options = dataclasses.replace(options, num_cpus=cpus, num_gpus=gpus)
        auth = spec is None or spec.auth != "disabled"
        return LocalPlan(
            name=name, labels=identity.labels(), config=LocalHeadConfig(**{**asdict(options), "auth": auth}),
            expires_at=datetime.now(timezone.utc) + request.expiry,
            owner={"dag_id": identity.dag_id, "run_id": identity.run_id},
        )  # fmt: skip

    def ensure(self, plan: ClusterPlan) -> bool:
        """Start the head (it answers before this returns), or find the one an earlier try started."""
        assert isinstance(plan, LocalPlan), plan
        try:
            return start_cluster(plan)[1]
        except LocalHeadError as exc:  # start_head stopped what it started before raising
            raise RayClusterNotReadyError(str(exc), name=plan.name) from exc

    def check(self, plan: ClusterPlan) -> ReadinessCheck:
        """The head runs and is up, as a start waits for it (``waiting_for``)."""
        info, cluster = find_cluster(plan.name), f"local Ray head {plan.name}"
        if info is None:
            return ReadinessCheck("failed", f"{cluster} is not running", cluster)
        waiting = waiting_for(info)
        if waiting:
            message = f"head running, still waiting for {', '.join(waiting)}"
            return ReadinessCheck("waiting", message, cluster, info.dashboard_url)
        return ReadinessCheck("ready", f"dashboard {info.dashboard_url} answers", cluster, info.dashboard_url)

    def handle(self, plan: ClusterPlan, dashboard_url: str) -> RayClusterHandle:
        """The handle of the running head (its pid, temp dir and token file are in ``extra``)."""
        info = find_cluster(plan.name)
        if info is None:
            raise RayClusterNotReadyError(
                f"local Ray head {plan.name} stopped after it was ready", name=plan.name
            )
        return _handle_of(info)

    def token(self, handle: RayClusterHandle) -> str | None:
        """The head's token, from its 0600 file."""
        return read_token(handle.auth_token_file)

    def _delete(self, cluster: RayClusterHandle | ClusterPlan, *, wait: bool, timeout: float) -> bool:
        """Stop a head from any process, also one still starting (always waits)."""
        extra = cluster.extra if isinstance(cluster, RayClusterHandle) else None
        info = LocalHeadInfo.from_dict(extra) if extra else find_cluster(cluster.name)
        return stop_cluster(info) if info is not None else False

    def find(self, name: str) -> LocalPlan:
        """A running local head registered under ``name``, e.g. by another DAG."""
        if find_cluster(name) is None:
            raise RayInvalidInputError(
                f"no local Ray head named {name!r} is running on this machine; start it first (e.g. with "
                "CreateRayClusterOperator(cluster_name=...)) or check the name"
            )
        return LocalPlan(name=name)

    def listed(self, labels: Mapping[str, str] = {}, now: datetime | None = None) -> list[RunCluster]:
        """Registered heads of this provider (their processes may be gone) whose labels include ``labels``."""
        now, found = now or datetime.now(timezone.utc), []
        for record in list_clusters({LABEL_CREATED_BY: CREATED_BY, **labels}):
            expires, owner = record.get("expires_at"), record.get("owner") or {}
            expired = expires is not None and datetime.fromisoformat(expires) <= now
            handle = _handle_of(record["info"], expires)
            found.append(RunCluster(handle, expired, owner.get("dag_id", ""), owner.get("run_id", "")))
        return found

    def lease_store(self) -> LocalLeaseStore:
        """The locks, records and leases of this machine's pools (a folder in the registry)."""
        return LocalLeaseStore()

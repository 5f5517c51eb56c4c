"""Pools on KubeRay: each pool's lock and record (the Lease ``ray-pool.<pool>``) and each run's lease (the
Lease ``ray-pool.<pool>.<holder>``), every write checked by ``resourceVersion`` (docs/architecture.md).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.kuberay.client import (
    CREATED_BY,
    LABEL_CREATED_BY,
    KubeRayConflictError,
    KubeRayNotFoundError,
    _Objects,
    _short_hash,
)

if TYPE_CHECKING:
    from airflow_ray_provider.kuberay.client import KubeRayClient

log = logging.getLogger(__name__)

LABEL_POOL = "airflow-ray-provider/pool"
LABEL_POOL_ROLE = "airflow-ray-provider/pool-role"  # "lock": the pool's own Lease; "holder": a run's
ANNOTATION_POOL_RECORD = "airflow-ray-provider/pool-record"
LEASE_PREFIX = "ray-pool."
NAME_MAX = 253  # a Lease name is a DNS-1123 subdomain


def lease_name(pool: str, holder: str | None = None) -> str:
    """The pool's Lease name, or ``holder``'s in it: a valid name, with a hash of ``holder`` when it had to
    change (other characters, too long), so two holders never share one."""
    base = f"{LEASE_PREFIX}{pool}"
    if holder is None:
        return base
    slug = re.sub(r"[^a-z0-9-]+", "-", holder.lower()).strip("-")
    if slug != holder or len(base) + 1 + len(slug) > NAME_MAX:
        slug = f"{slug[: NAME_MAX - len(base) - 12].rstrip('-')}-{_short_hash(holder)}".lstrip("-")
    return f"{base}.{slug}"


def micro_time(epoch: float) -> str:
    """``epoch`` as a Kubernetes ``MicroTime`` (RFC 3339, UTC, microseconds)."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expiry(lease: dict[str, Any]) -> float:
    """When a Lease expires (epoch seconds; ``0``: never renewed, or released)."""
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity") or not spec.get("renewTime"):
        return 0.0
    renewed = datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
    return renewed.timestamp() + float(spec.get("leaseDurationSeconds") or 0)


class _Leases(_Objects):
    KIND, API = "Lease", "CoordinationV1Api"


class KubeRayLeaseStore:
    """The pools of one namespace (the pool interface's ``LeaseStore``), through ``client``'s calls.

    :param lock_ttl: seconds a pool's lock outlives its holder's last renewal (renewed every third of it).
    :param poll_interval: seconds between looks at a lock another decider holds.
    """

    def __init__(
        self,
        client: KubeRayClient,
        *,
        namespace: str | None = None,
        lock_ttl: float = 15.0,
        poll_interval: float = 0.2,
    ) -> None:
        self.leases = _Leases(client, namespace)
        self.namespace = self.leases.namespace
        self.lock_ttl = lock_ttl
        self.poll_interval = poll_interval
        self.identity = f"{socket.gethostname()}/{os.getpid()}"

    def _labelled(self, **labels: str) -> list[dict[str, Any]]:
        return self.leases.list_labelled({LABEL_CREATED_BY: CREATED_BY, **labels})

    def _body(self, name: str, pool: str, role: str, spec: dict[str, Any], **annotations: str) -> dict:
        labels = {LABEL_CREATED_BY: CREATED_BY, LABEL_POOL: pool, LABEL_POOL_ROLE: role}
        metadata = {"name": name, "namespace": self.namespace, "labels": labels, "annotations": annotations}
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    # ------------------------------------------------------------------ lock
    @contextmanager
    def lock(self, pool: str, *, timeout: float) -> Iterator[None]:
        """Hold the pool's lock; ``TimeoutError`` after ``timeout`` seconds of another holder's."""
        token = f"{self.identity}/{uuid.uuid4().hex[:8]}"
        self._acquire(pool, token, timeout)
        stop = threading.Event()
        keeper = threading.Thread(
            target=self._keep, args=(pool, token, stop), name=f"lock-{pool}", daemon=True
        )
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()
            self._as_holder(pool, token, free=True)

    @staticmethod
    def _holder(lease: dict[str, Any] | None) -> str | None:
        return (lease.get("spec") or {}).get("holderIdentity") if lease is not None else None

    def _acquire(self, pool: str, token: str, timeout: float) -> None:
        name, deadline = lease_name(pool), time.monotonic() + timeout
        while True:
            lease, now = self.leases.find(name), time.time()
            if self._holder(lease) == token:  # a create that a retry repeated after it had landed
                return
            taken = {"holderIdentity": token, "leaseDurationSeconds": math.ceil(self.lock_ttl)}
            taken.update(acquireTime=micro_time(now), renewTime=micro_time(now))
            try:
                if lease is None:
                    self.leases.create(self._body(name, pool, "lock", taken))
                    return
                if expiry(lease) <= now:  # free, or its holder stopped renewing
                    transitions = lease["spec"].get("leaseTransitions", 0) + 1
                    self.leases.replace(name, {**lease, "spec": {**taken, "leaseTransitions": transitions}})
                    return
            except KubeRayConflictError:
                continue  # another decider wrote first: look again
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"pool {pool!r}: its lock, Lease {self.namespace}/{name}, is held by "
                    f"{self._holder(lease)}; gave up after {timeout}s (a killed holder's lock expires "
                    f"{self.lock_ttl}s after its last renewal)"
                )
            time.sleep(self.poll_interval)

    def _keep(self, pool: str, token: str, stop: threading.Event) -> None:
        """Renew the lock every third of ``lock_ttl`` until ``stop`` (the holder's heartbeat)."""
        while not stop.wait(self.lock_ttl / 3):
            try:
                if not self._as_holder(pool, token):
                    log.error("pool %r: lost its lock Lease %s", pool, lease_name(pool))
                    return
            except Exception:  # the next beat tries again; the lock lasts lock_ttl
                log.warning("pool %r: renewing its lock failed", pool, exc_info=True)

    def _as_holder(self, pool: str, token: str, *, free: bool = False) -> bool:
        """Renew the lock, or ``free`` it (delete it, with the pool's record gone), while ``token`` holds it,
        again on a version written meanwhile; ``False``: another holds it, or none."""
        name = lease_name(pool)
        while self._holder(lease := self.leases.find(name)) == token:
            assert lease is not None
            try:
                if not free:
                    lease["spec"]["renewTime"] = micro_time(time.time())
                    self.leases.replace(name, lease)
                elif ANNOTATION_POOL_RECORD in (lease["metadata"].get("annotations") or {}):
                    lease["spec"] = {k: v for k, v in lease["spec"].items() if k == "leaseTransitions"}
                    self.leases.replace(name, lease)
                else:
                    preconditions = {"resourceVersion": lease["metadata"]["resourceVersion"]}
                    self.leases.delete(name, body={"preconditions": preconditions})
                return True
            except (KubeRayConflictError, KubeRayNotFoundError):
                continue  # written or deleted meanwhile: look again
        return False

    # ---------------------------------------------------------------- record
    def read(self, pool: str) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """The pool's record (``None``: none) and its leases, holder -> expiry (expired ones too)."""
        lock = self.leases.find(lease_name(pool))
        raw = (lock["metadata"].get("annotations") or {}).get(ANNOTATION_POOL_RECORD) if lock else None
        leases = {
            str(self._holder(item)): expiry(item)
            for item in self._labelled(**{LABEL_POOL: pool, LABEL_POOL_ROLE: "holder"})
            if self._holder(item)
        }
        return (json.loads(raw) if raw else None), leases

    def write(self, pool: str, record: dict[str, Any] | None) -> None:
        """Replace the pool's record (``None``: forget the pool and its leases)."""
        name, text = lease_name(pool), json.dumps(record, sort_keys=True)
        if record is None:
            for item in self._labelled(**{LABEL_POOL: pool, LABEL_POOL_ROLE: "holder"}):
                self.leases.delete(item["metadata"]["name"])
        kept = {ANNOTATION_POOL_RECORD: text} if record is not None else {}

        def change(lease: dict[str, Any]) -> None:
            annotations = lease["metadata"].get("annotations") or {}
            annotations = {k: x for k, x in annotations.items() if k != ANNOTATION_POOL_RECORD}
            lease["metadata"]["annotations"] = {**annotations, **kept}

        self._put(name, self._body(name, pool, "lock", {}, **kept) if kept else None, change)

    def _put(self, name: str, new: dict[str, Any] | None, change: Callable[[dict[str, Any]], None]) -> None:
        """Create the Lease ``name`` as ``new`` (``None``: only if it exists), or ``change`` and replace it; a
        write that a concurrent one made stale (409) is made again on the new version."""
        while True:
            lease = self.leases.find(name)
            try:
                if lease is not None:
                    change(lease)
                    self.leases.replace(name, lease)
                elif new is not None:
                    self.leases.create(new)
                return
            except KubeRayConflictError:
                log.debug("Lease %s changed since it was read; writing it again", name)

    def pools(self) -> list[str]:
        """Every pool with a record in this namespace."""
        return sorted(
            item["metadata"]["labels"][LABEL_POOL]
            for item in self._labelled(**{LABEL_POOL_ROLE: "lock"})
            if ANNOTATION_POOL_RECORD in (item["metadata"].get("annotations") or {})
        )

    # ---------------------------------------------------------------- leases
    def renew(self, pool: str, holder: str, expires: float) -> None:
        """Take or renew ``holder``'s lease until ``expires`` (to the microsecond: ``renewTime`` is set so
        that adding the whole ``leaseDurationSeconds`` gives it); safe without the lock."""
        name = lease_name(pool, holder)
        seconds = max(1, math.ceil(expires - time.time()))
        times = {"renewTime": micro_time(expires - seconds), "leaseDurationSeconds": seconds}
        spec = {"holderIdentity": holder, "acquireTime": times["renewTime"], **times}
        self._put(name, self._body(name, pool, "holder", spec), lambda lease: lease["spec"].update(times))

    def release(self, pool: str, holder: str) -> None:
        """End ``holder``'s lease (nothing if it has none)."""
        self.leases.delete(lease_name(pool, holder))

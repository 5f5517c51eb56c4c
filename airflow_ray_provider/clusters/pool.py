"""Pools: one named Ray cluster that many runs share under leases, deleted once idle (docs/launch.md,
"Pools"). Pure decisions here; a :class:`LeaseStore` keeps each pool's lock, record and leases in plain
data (a folder locally, ``coordination.k8s.io/v1`` Leases on KubeRay).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay import KubeRaySpecError, check_cluster_name


@dataclass(frozen=True)
class PoolOptions:
    """A pool as a task or a CLI run names it (its cluster has its name); seconds: ``idle_ttl`` after the
    last lease, ``lease_ttl`` after a lease's last renewal. ``replace``: a cluster of another spec is
    replaced once no lease holds it, instead of failing. ``prices`` (``Prices.to_dict()``): kept in the
    record by the run that creates the cluster, they price every job on it."""

    name: str
    idle_ttl: float = 600.0
    lease_ttl: float = 60.0
    replace: bool = False
    prices: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        try:
            check_cluster_name(self.name)
        except KubeRaySpecError as exc:
            raise RayInvalidInputError(f"pool: {exc}") from exc
        if self.idle_ttl < 0:
            raise RayInvalidInputError(f"pool.idle_ttl must be 0 or more seconds, got {self.idle_ttl}")
        if self.lease_ttl < 4:
            raise RayInvalidInputError(f"pool.lease_ttl must be at least 4 seconds, got {self.lease_ttl}")

    @property
    def heartbeat(self) -> float:
        """Seconds between a holder's renewals."""
        return self.lease_ttl / 4


@dataclass(frozen=True)
class PoolRecord:
    """What the store keeps beside the pool's cluster: its spec's :func:`fingerprint`; ``idle_since`` (epoch
    seconds; ``None``: leased or never used); ``deleting`` (since ``deleting_since``; no lease until it is
    gone, a dead deleter's deletion is resumed); the ``idle_ttl`` of its last release (the janitor's).
    A store keeps it as its ``asdict``."""

    cluster: str
    fingerprint: dict[str, str] = field(default_factory=dict)
    idle_since: float | None = None
    deleting: bool = False
    idle_ttl: float = 600.0
    deleting_since: float | None = None
    prices: dict[str, Any] | None = None


class PoolStep(Enum):
    """What a run does with the pool's cluster, decided under the pool's lock."""

    CREATE = "create"  # no cluster: create it, then lease it
    USE = "use"  # lease the running cluster
    REPLACE = "replace"  # its spec differs and no lease holds it: delete it, then create it anew
    WAIT = "wait"  # a deletion is under way, or a replacement waits for the last lease: look again


def fingerprint(spec: dict[str, Any]) -> dict[str, str]:
    """A spec as ``{dotted.path: JSON value}``, so a difference is named by its field."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, list) and value:
            for index, item in enumerate(value):
                walk(f"{prefix}[{index}]", item)
        else:
            flat[prefix] = json.dumps(value, sort_keys=True)

    walk("", spec)
    return flat


def live_holders(leases: dict[str, float], now: float) -> list[str]:
    """The holders whose lease has not expired (``leases``: holder -> expiry, epoch seconds)."""
    return sorted(holder for holder, expires in leases.items() if expires > now)


def decide(
    record: PoolRecord | None,
    *,
    spec: dict[str, str],
    leases: dict[str, float],
    now: float,
    options: PoolOptions,
) -> PoolStep:
    """The next step of a run (``spec``: its :func:`fingerprint`) that wants the pool (``record`` ``None``: no
    cluster); the caller holds the lock. :class:`RayInvalidInputError`: another spec, ``replace`` off."""
    if record is None:
        return PoolStep.CREATE
    if record.deleting:
        return PoolStep.WAIT
    differing = sorted(
        k for k in spec.keys() | record.fingerprint.keys() if spec.get(k) != record.fingerprint.get(k)
    )
    if not differing:
        return PoolStep.USE
    if not options.replace:
        fields = ", ".join(
            f"{k} (pool: {record.fingerprint.get(k, 'unset')}, this run: {spec.get(k, 'unset')})"
            for k in differing
        )
        raise RayInvalidInputError(
            f"pool {options.name!r}: its cluster {record.cluster} runs another spec: {fields}. Use the "
            "pool's spec, another pool name, or replace=True to replace the cluster once no run holds it"
        )
    return PoolStep.WAIT if live_holders(leases, now) else PoolStep.REPLACE


def idle_expired(record: PoolRecord, leases: dict[str, float], now: float, idle_ttl: float) -> bool:
    """Whether nothing holds the pool and its idle time is over (the janitor and the next run delete it)."""
    return (
        not record.deleting
        and not live_holders(leases, now)
        and record.idle_since is not None
        and now >= record.idle_since + idle_ttl
    )


class LeaseStore(Protocol):
    """Where one backend keeps its pools' locks, records and leases (plain data, epoch seconds)."""

    def lock(self, pool: str, *, timeout: float) -> AbstractContextManager[None]:
        """Hold the pool's lock (one decider at a time, across processes and hosts); ``TimeoutError``
        after ``timeout`` seconds. A holder that dies loses it (a file lock; an expiring Lease)."""
        ...

    def read(self, pool: str) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """The pool's record (a :class:`PoolRecord` as a dict; ``None``: none) and all its leases."""
        ...

    def write(self, pool: str, record: dict[str, Any] | None) -> None:
        """Replace the pool's record (``None``: forget the pool and its leases)."""
        ...

    def renew(self, pool: str, holder: str, expires: float) -> None:
        """Take or renew ``holder``'s lease until ``expires``; safe without the lock."""
        ...

    def release(self, pool: str, holder: str) -> None:
        """End ``holder``'s lease (nothing if it has none)."""
        ...

    def pools(self) -> list[str]:
        """The names of every pool with a record (the janitor's list)."""
        ...

"""Pools: one named Ray cluster that many runs share, kept by leases and deleted once idle.

A run on a pool holds a lease (its holder: the run's submission id) while its job runs and renews it by a
heartbeat (the worker's wait, or the trigger's poll); the lease of a holder that was killed expires
``lease_ttl`` after its last renewal. Every decision about the pool's cluster (create it, use it, replace
it, delete it) is taken under the pool's lock from one record, so runs that start together create one
cluster. The cluster outlives its last lease by ``idle_ttl``; then the next run that looks or the janitor
deletes it. ``cleanup`` acts on a pool run's job only, never on the pool's cluster.

:class:`LeaseStore` keeps the lock, the record and the leases: a folder with file locks for local heads
(:mod:`airflow_ray_provider.local`), ``coordination.k8s.io/v1`` Leases on KubeRay
(:mod:`airflow_ray_provider.kuberay`). Both speak plain data, so the client layers import nothing from here.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay import KubeRaySpecError, check_cluster_name


@dataclass(frozen=True)
class PoolOptions:
    """A pool as a task or a CLI run names it.

    :param name: the pool's name; its cluster has the same name (a name KubeRay accepts).
    :param idle_ttl: seconds the cluster stays after its last lease ends (0: deleted at once).
    :param lease_ttl: seconds after its last renewal that a lease expires (a heartbeat renews it four
        times per ``lease_ttl``).
    :param replace: when the pool's cluster runs another spec, replace it once no lease holds it (the
        run waits) instead of failing.
    :param prices: the pool's price table (``Prices.to_dict()``): the run that creates the cluster keeps it
        in the pool's record, and every job on that cluster is priced by it, whatever its task says.
    """

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
    """What the store keeps beside the pool's cluster.

    :param cluster: the cluster's name.
    :param fingerprint: the spec it was created from, flattened (:func:`fingerprint`).
    :param idle_since: when its last lease ended (epoch seconds; ``None``: leased, or never used).
    :param deleting: a deletion is under way: no lease may be taken until the cluster is gone.
    :param idle_ttl: the idle TTL of the run that last released it (what the janitor goes by).
    :param deleting_since: when the deletion began (a deletion whose deleter died is resumed later).
    :param prices: the pool's price table, from the run that created the cluster.
    """

    cluster: str
    fingerprint: dict[str, str] = field(default_factory=dict)
    idle_since: float | None = None
    deleting: bool = False
    idle_ttl: float = 600.0
    deleting_since: float | None = None
    prices: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as the stores keep it (JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PoolRecord:
        """The record a store read."""
        return cls(**data)


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
    """The next step of a run that wants the pool (pure: the caller holds the lock and acts on it).

    :param record: the pool's record (``None``: no cluster).
    :param spec: the run's :func:`fingerprint`.
    :raises RayInvalidInputError: the cluster runs another spec and ``replace`` is off, naming the fields.
    """
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
        """The pool's record (``PoolRecord.to_dict``; ``None``: none) and its leases, expired ones too."""
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

"""Pools: one named Ray cluster that many runs share under leases, deleted once idle (docs/launch.md,
"Pools"): the pure decisions (:func:`decide`, taken under the pool's lock, creating too, so runs that
start together make one cluster), a run's lease and the janitor's sweep. No Airflow imports.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters import ClusterRequest, TaskIdentity
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.jobs.submission import base_submission_id
from airflow_ray_provider.kuberay import KubeRaySpecError, check_cluster_name
from airflow_ray_provider.launch.targets import ClusterTarget, wait_until_ready
from airflow_ray_provider.launch.usage import parse_prices

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import ClusterBackend, ClusterPlan, LeaseStore, RayClusterHandle

log = logging.getLogger(__name__)

#: A pool's cluster has no expiry of its own (leases and the idle TTL decide when it goes).
POOL_EXPIRY = timedelta(days=3650)
#: Seconds the janitor waits for a pool's lock.
LOCK_TIMEOUT_S = 60.0
#: Seconds after which a deletion still marked is taken for one whose deleter died (and is resumed).
STALE_DELETION_S = 900.0
#: Seconds between looks while a deletion or a replacement is awaited.
WAIT_INTERVAL_S = 1.0


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


def pool_options(
    value: PoolOptions | dict[str, Any] | None, poll_interval: float | None = None
) -> PoolOptions | None:
    """A pool as a task or a script names it (``{"name": ..., "idle_ttl": ...}``), checked.

    :param poll_interval: the run's seconds between looks, at which it renews its lease: below the pool's
        heartbeat, or the lease would lapse between looks.
    :raises RayInvalidInputError: naming the field.
    """
    if isinstance(value, dict):
        known = {f.name for f in dataclasses.fields(PoolOptions)}
        if unknown := sorted(set(value) - known):
            raise RayInvalidInputError(f"pool has unknown key(s) {unknown}; known: {sorted(known)}")
        if "name" not in value:
            raise RayInvalidInputError("pool.name is required")
        prices = parse_prices(value.get("prices"), source="pool.prices")
        try:
            value = PoolOptions(**{**value, "prices": prices.to_dict() if prices else None})
        except TypeError as exc:
            raise RayInvalidInputError(f"pool: {exc}") from exc
    elif value is not None and not isinstance(value, PoolOptions):
        raise RayInvalidInputError(f"pool must be a mapping with a name, got {type(value).__name__}")
    if value is not None and poll_interval is not None and poll_interval >= value.heartbeat:
        raise RayInvalidInputError(
            f"poll_interval ({poll_interval:g} s) must be below pool.lease_ttl / 4 "
            f"({value.heartbeat:g} s): a run renews its lease at its looks; lower poll_interval or raise "
            "pool.lease_ttl"
        )
    return value


def cluster_target(
    backend: ClusterBackend,
    request: ClusterRequest,
    identity: TaskIdentity,
    pool: PoolOptions | None = None,
    **options: Any,
) -> ClusterTarget:
    """A cluster of the run's own, or with ``pool`` a lease on the pool's cluster, held by the run's base
    submission id (a retry renews it); ``options`` go to :class:`ClusterTarget`. No API call; closes
    ``backend`` on errors.

    The pool's cluster is named after the pool, labelled as the pool's (not a DAG run's), with no expiry:
    the same for every run of the pool, so any of them may create it; its runs must share the fingerprint
    of the cluster spec and the local head's options.
    """
    try:
        if pool is None:
            return ClusterTarget(backend=backend, plan=backend.plan(request, identity), **options)
        holder = base_submission_id(identity.dag_id, identity.run_id, identity.task_id, identity.map_index)
        shared = dataclasses.replace(request, cluster_name=pool.name, expiry=POOL_EXPIRY)
        plan = backend.plan(shared, TaskIdentity("pool", pool.name, "cluster"))
        spec = dataclasses.asdict(request.spec) if request.spec is not None else {}
        fingerprinted = fingerprint({"spec": spec, "local": dataclasses.asdict(request.local_options)})
        return ClusterTarget(backend=backend, plan=plan, pool=PoolLease(backend, pool, holder),
                             spec=fingerprinted, **options)  # fmt: skip
    except BaseException:
        backend.close()
        raise


def delete_pool(backend: ClusterBackend, store: LeaseStore, name: str, say: Callable[[str], None]) -> None:
    """Delete a pool's cluster (its record is marked ``deleting``), then forget the pool."""
    try:
        plan = backend.find(name)
    except RayInvalidInputError:
        plan = None
    if plan is not None:
        backend.delete(plan, wait=True, timeout=300)
    with store.lock(name, timeout=LOCK_TIMEOUT_S):
        store.write(name, None)
    say(f"Deleted pool {name}'s Ray cluster" if plan is not None else f"Forgot pool {name} (no cluster)")


def deleting(record: PoolRecord) -> dict[str, Any]:
    """The record marked ``deleting`` from now (no lease can be taken until the pool is forgotten)."""
    return dataclasses.asdict(dataclasses.replace(record, deleting=True, deleting_since=time.time()))


def delete_idle_pools(
    backend: ClusterBackend,
    say: Callable[[str], None] = log.info,
    *,
    dry_run: bool = False,
    lock_timeout: float = LOCK_TIMEOUT_S,
) -> list[str]:
    """Delete every pool of ``backend`` that nothing holds and whose idle TTL is over; never one with a
    live lease. A pool whose holders all died (their leases expired, none released) is idle since its
    last lease expired; a deletion whose deleter died (marked ``STALE_DELETION_S`` ago) is resumed. A pool
    whose lock stays busy for ``lock_timeout`` is left for the next look."""
    found: list[str] = []
    store = backend.lease_store()
    for name in store.pools():
        try:
            with store.lock(name, timeout=lock_timeout):
                raw, leases = store.read(name)
                if raw is None:
                    continue
                record, now = PoolRecord(**raw), time.time()
                if record.idle_since is None and leases and not live_holders(leases, now):
                    record = dataclasses.replace(record, idle_since=max(leases.values()))
                stale = record.deleting and now - (record.deleting_since or 0.0) > STALE_DELETION_S
                if not stale and not idle_expired(record, leases, now, record.idle_ttl):
                    continue
                if not dry_run:
                    store.write(name, deleting(record))
        except TimeoutError:
            continue
        found.append(name)
        if not dry_run:
            delete_pool(backend, store, name, say)
    return found


def janitor_sweep(
    backend: ClusterBackend,
    say: Callable[[str], None] = log.info,
    *,
    orphaned: Callable[[str, str], str | None] = lambda dag_id, run_id: None,
    dry_run: bool = False,
    wait: bool = True,
) -> tuple[list[str], list[str]]:
    """The janitor: delete (unless ``dry_run``) the provider's clusters whose expiry has passed, the run
    clusters ``orphaned(dag_id, run_id)`` gives a reason for, and the idle pools of
    :func:`delete_idle_pools`; never a pool's cluster (it goes by its leases). Returns the clusters' names
    and the pools'."""
    verb = "Would delete" if dry_run else "Deleting"
    pools = set(backend.lease_store().pools())
    found = []
    for listed in backend.listed():
        orphan = listed.run_id and orphaned(listed.dag_id, listed.run_id)
        if (listed.expired or orphan) and listed.handle.name not in pools:
            found.append((listed.handle, "its expiry has passed" if listed.expired else str(orphan)))
    for handle, why in found:
        where = f"{handle.namespace}/{handle.name}" if handle.namespace else handle.name
        say(f"{verb} Ray cluster {where} ({backend.kind}): {why}")
        if not dry_run:
            backend.delete(handle, wait=wait, timeout=300)
    idle = delete_idle_pools(backend, say, dry_run=dry_run)
    for name in idle:
        say(f"{verb} pool {name} ({backend.kind}): its idle TTL is over")
    return [handle.name for handle, _ in found], idle


class PoolLease:
    """One run's lease on a pool (``holder``: the run's base submission id, so a retried try renews the
    same lease; ``held``: the lease was taken already, by a run rebuilt after a deferral)."""

    def __init__(self, backend: ClusterBackend, options: PoolOptions, holder: str, *, held: bool = False):
        self.backend, self.options, self.holder = backend, options, holder
        self.store = backend.lease_store()
        self.held = held
        self.renewed = 0.0
        #: The pool's price table: its record's once leased (a rebuilt lease has it in ``options``).
        self.prices = options.prices

    def ref(self) -> dict[str, Any]:
        """How a deferred run's target makes this lease again (JSON), with the pool's prices."""
        return {"pool": dataclasses.asdict(dataclasses.replace(self.options, prices=self.prices)),
                "holder": self.holder}  # fmt: skip

    def renew(self) -> None:
        """Take or renew the lease for ``lease_ttl`` seconds."""
        now = time.time()
        self.store.renew(self.options.name, self.holder, now + self.options.lease_ttl)
        self.renewed, self.held = now, True

    def heartbeat(self) -> None:
        """Renew the lease if a heartbeat is due (called at every look while the run waits)."""
        if self.held and time.time() - self.renewed >= self.options.heartbeat:
            self.renew()

    def acquire(
        self, plan: ClusterPlan, spec: dict[str, str], *, timeout: float, say: Callable[[str], None]
    ) -> RayClusterHandle:
        """Lease the pool's cluster (creating it, or replacing one of another spec, as the pool's record
        says), then wait until it answers.

        :raises RayInvalidInputError: the pool's cluster runs another spec (naming the fields) and the
            pool does not replace it; nothing was submitted.
        :raises RayClusterNotReadyError: no cluster could be leased, or it did not answer, in ``timeout``.
        """
        name, deadline = self.options.name, time.monotonic() + timeout
        while True:
            with self.store.lock(name, timeout=max(1.0, deadline - time.monotonic())):
                step = self._step(plan, spec, say, start_time=max(1.0, deadline - time.monotonic()))
            if step in (PoolStep.CREATE, PoolStep.USE):
                break
            if step is PoolStep.REPLACE:
                delete_pool(self.backend, self.store, name, say)
            elif time.monotonic() >= deadline:
                raise RayClusterNotReadyError(
                    f"pool {name!r}: its cluster was still being deleted or held by other runs after "
                    f"{timeout:g} s", name=name,
                )  # fmt: skip
            else:
                time.sleep(WAIT_INTERVAL_S)
        return wait_until_ready(self.backend, plan, timeout=max(1.0, deadline - time.monotonic()),
                                poll_interval=WAIT_INTERVAL_S, on_look=self.heartbeat)  # fmt: skip

    def _step(
        self, plan: ClusterPlan, spec: dict[str, str], say: Callable[[str], None], *, start_time: float
    ) -> PoolStep:
        """One decision under the lock, and what it does there (lease, create, mark for deletion). The
        creator's lease covers the cluster's start (``start_time`` seconds at most: no heartbeat runs
        while a local head starts), then is renewed as any other."""
        name = self.options.name
        raw, leases = self.store.read(name)
        record = PoolRecord(**raw) if raw is not None else None
        step = decide(record, spec=spec, leases=leases, now=time.time(), options=self.options)
        if step is PoolStep.USE and record is not None and self.backend.check(plan).verdict == "failed":
            say(f"Pool {name}'s cluster is gone or failed: starting it again")
            step = PoolStep.REPLACE
        if step is PoolStep.REPLACE and record is not None:
            self.store.write(name, deleting(record))
        elif step is PoolStep.USE and record is not None:
            self.renew()
            self.prices = record.prices
            if record.idle_since is not None:
                self.store.write(name, dataclasses.asdict(dataclasses.replace(record, idle_since=None)))
            say(f"Leased pool {name}'s running Ray cluster ({len(live_holders(leases, time.time()))} "
                "other live lease(s))")  # fmt: skip
        elif step is PoolStep.CREATE:
            record = PoolRecord(name, spec, idle_ttl=self.options.idle_ttl, prices=self.options.prices)
            self.store.write(name, dataclasses.asdict(record))
            self.store.renew(name, self.holder, time.time() + start_time + self.options.lease_ttl)
            self.held = True
            try:
                self.backend.ensure(plan)
            except BaseException:
                self.store.release(name, self.holder)
                self.held = False
                self.backend.delete(plan, wait=True, timeout=300)
                self.store.write(name, None)
                raise
            self.renew()
            say(f"Started pool {name}'s Ray cluster")
        return step

    def release(self, say: Callable[[str], None]) -> None:
        """End the lease; the last one starts the idle time (``idle_ttl`` 0: the cluster is deleted now),
        then idle-expired pools of the backend are deleted."""
        if not self.held:
            return
        name, delete_now = self.options.name, False
        with self.store.lock(name, timeout=LOCK_TIMEOUT_S):
            self.store.release(name, self.holder)
            self.held = False
            raw, leases = self.store.read(name)
            if raw is not None and not live_holders(leases, time.time()):
                record = PoolRecord(**raw)
                delete_now = self.options.idle_ttl == 0 and not record.deleting
                idle = dataclasses.replace(record, idle_since=time.time(), idle_ttl=self.options.idle_ttl)
                self.store.write(name, deleting(idle) if delete_now else dataclasses.asdict(idle))
                if not delete_now:
                    say(f"Released pool {name}: its cluster stays {self.options.idle_ttl:g} s unless leased")
        if delete_now:
            delete_pool(self.backend, self.store, name, say)
        delete_idle_pools(self.backend, say, lock_timeout=1.0)  # a busy pool is left for the next look

"""The cluster backend interface (:class:`ClusterBackend`: create, wait for and delete a cluster, local and
KubeRay alike), its request, plan and handle (the XCom every downstream task takes: it *refers* to the Ray
auth token, never holds it), readiness (:func:`event_for` ends the blocking wait and the trigger's alike;
an event never carries the token) and :class:`LeaseStore`, where a backend's pools keep their leases.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypedDict, get_args, runtime_checkable

from airflow_ray_provider.exceptions import (
    RayClusterNotReadyError,
    RayInvalidInputError,
    RayJobApiError,
    RayProviderError,
)
from airflow_ray_provider.kuberay import (
    LABEL_CREATED_BY,
    LABEL_DAG_ID,
    LABEL_RUN_HASH,
    KubeRaySpecError,
    RayClusterSpec,
    TokenRef,
    build_body,
    check_cluster_name,
    generate_name,
    ownership_labels,
)
from airflow_ray_provider.local import LocalClusterOptions

if TYPE_CHECKING:
    from airflow_ray_provider.jobs.client import JobClient

log = logging.getLogger(__name__)

#: One look at a cluster: ready, still coming up, or failed for good (waiting longer will not help).
Verdict = Literal["ready", "waiting", "failed"]
#: How a wait ended.
EventStatus = Literal["ready", "failed", "timeout", "error"]
EVENT_ERROR: Final = "error"
EVENT_STATUSES: tuple[EventStatus, ...] = get_args(EventStatus)

#: The cluster backends: an ephemeral local Ray head, or a KubeRay RayCluster.
BackendName = Literal["local", "kuberay"]
BACKENDS: tuple[BackendName, ...] = get_args(BackendName)


#: ``extra`` key of a handle: the dashboard's address for people, when it differs from Airflow's.
EXTRA_LINK_URL = "link_url"


@dataclass(frozen=True)
class RayClusterHandle:
    """Where a Ray cluster's dashboard (Job API) is and where its token is: a 0600 ``auth_token_file``
    (local), or the Kubernetes ``auth_token_secret`` read through ``conn_id``; ``extra``: details safe to
    show (pid, temp dir, ...). An unowned cluster (attached, or a RayJob's) is never deleted through it."""

    backend: BackendName
    name: str
    dashboard_url: str
    namespace: str | None = None
    auth_token_file: str | None = None
    auth_token_secret: str | None = None
    auth_token_secret_key: str | None = None
    conn_id: str | None = None
    extra: dict[str, Any] | None = None
    owned: bool = True

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise RayInvalidInputError(
                f"cluster handle backend must be one of {BACKENDS}, got {self.backend!r}"
            )
        if not self.name:
            raise RayInvalidInputError("cluster handle has an empty name")
        if not self.dashboard_url.startswith(("http://", "https://")):
            raise RayInvalidInputError(
                f"cluster handle dashboard_url must start with http:// or https://, "
                f"got {self.dashboard_url!r}"
            )

    @property
    def link_url(self) -> str:
        """The dashboard as a person's browser reaches it (extra links): ``extra["link_url"]`` when the
        cluster connection gives one (an ingress), else :attr:`dashboard_url` (how Airflow reaches it)."""
        return str((self.extra or {}).get(EXTRA_LINK_URL) or self.dashboard_url)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict for XCom."""
        return asdict(self)

    @classmethod
    def from_dict(cls, value: Any) -> RayClusterHandle:
        """A handle from an XCom value (or the handle itself); RayInvalidInputError if not one."""
        if isinstance(value, RayClusterHandle):
            return value
        if not isinstance(value, dict):
            raise RayInvalidInputError(
                "expected a cluster handle (the XCom of CreateRayClusterOperator, a dict with "
                f"backend, name and dashboard_url), got {type(value).__name__}"
            )
        missing = {"backend", "name", "dashboard_url"} - value.keys()
        if missing:
            raise RayInvalidInputError(
                f"cluster handle is missing {sorted(missing)}; pass the XCom of "
                "CreateRayClusterOperator (e.g. create_cluster.output)"
            )
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise RayInvalidInputError(f"cluster handle has unknown keys {sorted(unknown)}")
        return cls(**value)


def check_spec(spec: RayClusterSpec | dict[str, Any], *, default_auth: str | None = "auth_options") -> None:
    """Validate a spec (or a dict of its fields) and its body as KubeRay would, on any backend, with
    ``default_auth`` when it names none (``None``: not known yet); :class:`RayInvalidInputError` if bad."""
    try:
        typed = RayClusterSpec.from_dict(spec)
        auth = typed.auth or default_auth or "disabled"
        build_body(dataclasses.replace(typed, auth=auth), name="spec-check", namespace="default")
    except (KubeRaySpecError, ValueError, TypeError) as exc:
        raise RayInvalidInputError(str(exc)) from exc


@dataclass(frozen=True)
class ReadinessCheck:
    """One look at a cluster (e.g. ``RayCluster ray/x``): its last state in one line, KubeRay's
    ``status.conditions``, and a command that shows more (``inspect``)."""

    verdict: Verdict
    message: str
    cluster: str
    dashboard_url: str | None = None
    state: str = ""
    conditions: list[dict[str, Any]] = field(default_factory=list)
    inspect: str = ""

    def details(self) -> str:
        """`` Last status: .... Inspect it with: ...``, for an error."""
        inspect = f" Inspect it with: {self.inspect}" if self.inspect else ""
        return f" Last status: {self.state or 'no status'}.{inspect}"


class ReadinessEvent(TypedDict):
    """How waiting for a cluster ended (the trigger's event payload; the blocking wait's result too)."""

    status: EventStatus
    message: str
    dashboard_url: str | None
    conditions: list[dict[str, Any]]


def make_event(
    status: EventStatus,
    *,
    message: str = "",
    dashboard_url: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> ReadinessEvent:
    """Build an event; a ``ready`` one must carry the dashboard URL."""
    if status == "ready" and not dashboard_url:
        raise ValueError("a 'ready' event needs the dashboard URL")
    return {"status": status, "message": message, "dashboard_url": dashboard_url,
            "conditions": list(conditions or [])}  # fmt: skip


def validate_event(event: Any) -> ReadinessEvent:
    """Check an event before acting on it (a ``ready`` one has its URL); :class:`RayProviderError` if not."""
    if not isinstance(event, dict) or event.get("status") not in EVENT_STATUSES:
        raise RayProviderError(f"unexpected cluster readiness event: {event!r}")
    url, conditions = event.get("dashboard_url"), event.get("conditions")
    if not isinstance(conditions or [], list) or (event["status"] == "ready" and not url):
        raise RayProviderError(f"malformed cluster readiness event: {event!r}")
    message = str(event.get("message") or "")
    return make_event(event["status"], message=message, dashboard_url=url, conditions=conditions)


def event_for(check: ReadinessCheck, *, waited: float, timeout: float) -> ReadinessEvent | None:
    """The one rule: how the latest look ends a wait of ``waited`` of ``timeout`` s (``None``: wait on)."""
    if check.verdict == "ready":
        return make_event("ready", message=check.message, dashboard_url=check.dashboard_url)
    if check.verdict == "failed":
        return make_event("failed", message=check.message, conditions=check.conditions)
    if waited >= timeout:
        text = f"{check.cluster} was not ready after {timeout:.0f}s: {check.message}.{check.details()}"
        return make_event("timeout", message=text, conditions=check.conditions)
    return None


def probe_dashboard(url: str, token: str | None, timeout: float = 5.0) -> tuple[bool, str]:
    """``(True, ray_version)`` if the dashboard answers ``/api/version``, else ``(False, why)``."""
    from airflow_ray_provider.jobs.client import JobClient

    try:
        return True, JobClient(url, token=token, timeout=timeout, retry_attempts=1).version()
    except RayJobApiError as exc:
        return False, f"HTTP {exc.http_status}"
    except Exception as exc:
        return False, str(exc.__cause__ or exc)


@dataclass(frozen=True)
class RunCluster:
    """A provider-created cluster as listed: its handle, whether it expired, its DAG run (``""``: unknown;
    KubeRay records none: a namespace may hold several Airflow deployments' clusters)."""

    handle: RayClusterHandle
    expired: bool = False
    dag_id: str = ""
    run_id: str = ""


@dataclass(frozen=True)
class TaskIdentity:
    """Who asks for the cluster (``map_index`` -1: not mapped); its name and labels derive from it, not
    from the try number."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def labels(self) -> dict[str, str]:
        """Ownership labels of this task's cluster."""
        return ownership_labels(dag_id=self.dag_id, run_id=self.run_id, task_id=self.task_id)

    def run_labels(self) -> dict[str, str]:
        """Labels shared by every cluster of this DAG run (what a teardown without a handle deletes)."""
        labels = self.labels()
        return {k: labels[k] for k in (LABEL_CREATED_BY, LABEL_DAG_ID, LABEL_RUN_HASH)}


@dataclass(frozen=True)
class ClusterRequest:
    """What the create operator was asked for (templates rendered), for every backend: a ``spec`` (or, on
    KubeRay only, a full ``manifest``), a fixed name or a generated one, and the lifetime after which the
    janitor may delete it; ``namespace`` and ``dashboard_url_template`` override the connection's."""

    spec: RayClusterSpec | None = None
    manifest: dict[str, Any] | str | None = None
    cluster_name: str | None = None
    name_prefix: str = "ray"
    namespace: str | None = None
    dashboard_url_template: str | None = None
    local_options: LocalClusterOptions = field(default_factory=LocalClusterOptions)
    expiry: timedelta = timedelta(hours=24)

    @classmethod
    def from_arguments(
        cls,
        *,
        spec: RayClusterSpec | dict[str, Any] | None,
        local_options: LocalClusterOptions | dict[str, Any] | None,
        **fields: Any,
    ) -> ClusterRequest:
        """A request from operator arguments (plain-data ``spec`` and ``local_options``; bad fields:
        :class:`RayInvalidInputError`)."""
        try:
            parsed = RayClusterSpec.from_dict(spec) if spec is not None else None
            options = LocalClusterOptions.from_value(local_options)
        except (KubeRaySpecError, ValueError, TypeError) as exc:
            raise RayInvalidInputError(str(exc)) from exc
        return cls(spec=parsed, local_options=options, **fields)

    def name_for(self, identity: TaskIdentity) -> str:
        """The cluster name, explicit or generated; only names KubeRay accepts, on every backend
        (:class:`RayInvalidInputError`)."""
        try:
            if self.cluster_name:
                check_cluster_name(self.cluster_name)
                return self.cluster_name
            return generate_name(
                prefix=self.name_prefix, dag_id=identity.dag_id, run_id=identity.run_id,
                task_id=identity.task_id, map_index=identity.map_index,
            )  # fmt: skip
        except KubeRaySpecError as exc:
            raise RayInvalidInputError(str(exc)) from exc


@dataclass(frozen=True)
class ClusterPlan:
    """A validated request, fixed before any API call: all a readiness check needs (the trigger rebuilds
    it); a backend's own plan adds what creating takes. The last three fields are KubeRay's."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    dashboard_url_template: str | None = None
    token_ref: TokenRef | None = None


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


@runtime_checkable
class ClusterBackend(Protocol):
    """Create, wait for and delete Ray clusters of one kind: :meth:`plan` (no API call), :meth:`ensure`,
    :meth:`check` until ready (in a trigger when :attr:`can_defer`), :meth:`handle`; on any failure
    :meth:`delete` with the plan. A delete never deletes an unowned handle (it returns ``False``)."""

    kind: BackendName
    conn_id: str | None
    can_defer: bool
    #: Given each credential of the Job API clients made here (the Airflow face: its secrets masker).
    mask: Callable[[str], object] | None = None

    def plan(self, request: ClusterRequest, identity: TaskIdentity) -> ClusterPlan:
        """Validate the request, fix the name and body; no API call (:class:`RayInvalidInputError`)."""
        ...

    def ensure(self, plan: ClusterPlan) -> bool:
        """Create the cluster (``True``) or reuse the one an earlier try created (``False``)."""
        ...

    def check(self, plan: ClusterPlan) -> ReadinessCheck:
        """Look once (blocking I/O; triggers run it in a thread)."""
        ...

    def handle(self, plan: ClusterPlan, dashboard_url: str) -> RayClusterHandle:
        """The handle (XCom) of a ready cluster."""
        ...

    def token(self, handle: RayClusterHandle) -> str | None:
        """The token a handle refers to; ``None``: no token auth."""
        ...

    def job_client(self, handle: RayClusterHandle, **options: Any) -> JobClient:
        """The Job API client of one of these clusters, with its token (given to :attr:`mask`)."""
        from airflow_ray_provider.jobs.client import JobClient

        source = f"cluster {handle.name} ({handle.backend})"
        client = JobClient(handle.dashboard_url, token=self.token(handle), source=source, **options)
        for secret in client.secrets():
            if self.mask is not None:
                self.mask(secret)
        return client

    def delete(
        self, cluster: RayClusterHandle | ClusterPlan, *, wait: bool = True, timeout: float = 300
    ) -> bool:
        """Delete a cluster by its handle (or by its plan while it starts); ``False``: already gone, or not
        this task's (``owned=False``: attached here, its owner deletes it)."""
        if isinstance(cluster, RayClusterHandle) and not cluster.owned:
            where = f"{cluster.namespace}/{cluster.name}" if cluster.namespace else cluster.name
            log.info("Not deleting Ray cluster %s: this task does not own it (its owner deletes it)", where)
            return False
        return self._delete(cluster, wait=wait, timeout=timeout)

    def _delete(self, cluster: RayClusterHandle | ClusterPlan, *, wait: bool, timeout: float) -> bool:
        """Delete an owned cluster (:meth:`delete` asks first)."""
        ...

    def find(self, name: str) -> ClusterPlan:
        """What a look at the standing cluster ``name`` needs (:class:`RayInvalidInputError`: no such one)."""
        ...

    def attach(self, name: str) -> RayClusterHandle:
        """A handle (``owned=False``) to a standing cluster that is ready now: one look, no waiting
        (:class:`RayClusterNotReadyError`: not ready, with its state)."""
        plan = self.find(name)
        look = self.check(plan)
        if look.verdict != "ready" or not look.dashboard_url:
            raise RayClusterNotReadyError(
                f"{look.cluster} cannot be used: {look.message}.{look.details()}",
                name=name, namespace=plan.namespace, conditions=look.conditions,
            )  # fmt: skip
        log.info("Attached to standing %s (%s); it will not be deleted", look.cluster, look.message)
        return dataclasses.replace(self.handle(plan, look.dashboard_url), owned=False)

    def listed(self, labels: Mapping[str, str] = {}, now: datetime | None = None) -> list[RunCluster]:
        """Provider-created clusters whose labels include ``labels`` (``expired``: at ``now``)."""
        ...

    def delete_labelled(self, labels: Mapping[str, str], *, wait: bool, timeout: float) -> list[str]:
        """Delete every provider cluster whose labels include ``labels``; returns their names."""
        handles = [found.handle for found in self.listed(labels)]
        for handle in handles:
            self.delete(handle, wait=wait, timeout=timeout)
        return [handle.name for handle in handles]

    def lease_store(self) -> LeaseStore:
        """Where this backend's pools keep their locks, records and leases."""
        ...

    def close(self) -> None:
        """Release clients; the backend is not used afterwards."""
        return None

"""The local backend: an ephemeral Ray head on this machine, the embedded default (no connection).

Any process on the machine finds and stops the head through the registry of :mod:`.local`;
the KubeRay spec is summarised into its CPUs and GPUs, so one DAG runs on either backend unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_ray_provider.clusters.backend import (
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    ReadinessCheck,
    RunCluster,
    TaskIdentity,
    check_spec,
    keeps_unowned,
)
from airflow_ray_provider.clusters.handle import BackendName, RayClusterHandle
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.kuberay import CREATED_BY, LABEL_CREATED_BY
from airflow_ray_provider.local import (
    LocalClusterOptions,
    LocalHeadError,
    LocalHeadInfo,
    LocalLeaseStore,
    find_cluster,
    list_clusters,
    read_token,
    start_cluster,
    stop_cluster,
    waiting_for,
)


@dataclass(frozen=True)
class LocalPlan(ClusterPlan):
    """A local head to start: its options, token auth, expiry and the DAG run that starts it."""

    options: LocalClusterOptions = field(default_factory=LocalClusterOptions)
    auth: bool = True
    expires_at: datetime | None = None
    owner: dict[str, str] = field(default_factory=dict)


def local_options_for(request: ClusterRequest) -> LocalClusterOptions:
    """Local options; unless set, ``num_cpus`` is the spec's head and workers' CPUs (capped at this
    machine's cores) and ``num_gpus`` 0 when the spec asks for none."""
    options, spec = request.local_options, request.spec
    if spec is None:
        return options
    cpus = options.num_cpus
    if cpus is None:
        cpus = max(1, min(os.cpu_count() or 1, math.ceil(spec.total_cpus)))
    gpus = options.num_gpus if options.num_gpus is not None else (0 if spec.total_gpus == 0 else None)
    return dataclasses.replace(options, num_cpus=cpus, num_gpus=gpus)


def _handle_of(info: LocalHeadInfo | dict[str, Any], expires_at: str | None = None) -> RayClusterHandle:
    """The handle of a head (a listed one's ``extra`` has its ``expires_at`` too, for ``clusters list``)."""
    info = LocalHeadInfo.from_dict(info) if isinstance(info, dict) else info
    extra = {**info.to_dict(), "expires_at": expires_at} if expires_at else info.to_dict()
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
        """Validate the name and the spec (the local head honours its CPUs, GPUs and auth)."""
        name = request.name_for(identity)
        if request.spec is not None:
            check_spec(request.spec)
        return LocalPlan(
            name=name, labels=identity.labels(), options=local_options_for(request),
            auth=request.spec is None or request.spec.auth != "disabled",
            expires_at=datetime.now(timezone.utc) + request.expiry,
            owner={"dag_id": identity.dag_id, "run_id": identity.run_id},
        )  # fmt: skip

    def ensure(self, plan: ClusterPlan) -> bool:
        """Start the head (it answers before this returns), or find the one an earlier try started."""
        assert isinstance(plan, LocalPlan), plan
        try:
            _, created = start_cluster(
                plan.name, plan.options, auth=plan.auth, labels=plan.labels, expires_at=plan.expires_at,
                owner=plan.owner,
            )  # fmt: skip
        except LocalHeadError as exc:  # start_head stopped what it started before raising
            raise RayClusterNotReadyError(str(exc), name=plan.name) from exc
        return created

    def check(self, plan: ClusterPlan) -> ReadinessCheck:
        """The head runs and is up, as a start waits for it (:func:`~.local.waiting_for`)."""
        info, cluster = find_cluster(plan.name), f"local Ray head {plan.name}"
        if info is None:
            return ReadinessCheck("failed", f"{cluster} is not running", cluster)
        waiting = waiting_for(info, read_token(info.token_file) if info.token_file else None)
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
        return read_token(handle.auth_token_file) if handle.auth_token_file else None

    def delete(
        self, cluster: RayClusterHandle | ClusterPlan, *, wait: bool = True, timeout: float = 300
    ) -> bool:
        """Stop a head from any process, also one still starting (always waits); never an unowned one."""
        if isinstance(cluster, RayClusterHandle) and keeps_unowned(cluster):
            return False
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

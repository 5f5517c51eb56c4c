"""Typed RayCluster status, the one function that reads KubeRay's verdict from it, and the dashboard URL.

:func:`readiness` says whether the head pod is ready, failed for good or still coming up. The KubeRay
cluster backend's readiness check (:mod:`airflow_ray_provider.clusters.kuberay`) starts from it and then
probes the dashboard; the sync wait, the deferrable trigger and the operator all use that one check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, cast

CONDITION_HEAD_POD_READY = "HeadPodReady"
CONDITION_PROVISIONED = "RayClusterProvisioned"
CONDITION_REPLICA_FAILURE = "ReplicaFailure"
STATE_READY = "ready"
STATE_FAILED = "failed"
DASHBOARD_PORT_NAME = "dashboard"
DEFAULT_DASHBOARD_PORT = 8265


class Condition(TypedDict, total=False):
    """A ``metav1.Condition`` as KubeRay writes it."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class HeadInfo(TypedDict, total=False):
    """``status.head``: where the head pod and its service are."""

    podIP: str
    podName: str
    serviceIP: str
    serviceName: str


class RayClusterStatusDict(TypedDict, total=False):
    """The subset of ``status`` the provider reads."""

    state: str
    reason: str
    conditions: list[Condition]
    head: HeadInfo
    endpoints: dict[str, str]
    readyWorkerReplicas: int
    desiredWorkerReplicas: int


@dataclass(frozen=True)
class ClusterStatus:
    """A RayCluster's status, typed.

    :param name: ``metadata.name``.
    :param namespace: ``metadata.namespace``.
    :param state: ``status.state`` (``ready``, ``suspended``, ``failed`` or empty while provisioning).
    :param reason: ``status.reason`` (why the state is what it is, when KubeRay says).
    :param conditions: ``status.conditions``.
    :param head: ``status.head``.
    :param endpoints: ``status.endpoints``: service port name to port number (strings).
    :param deleting: the object has a ``deletionTimestamp``.
    :param uid: ``metadata.uid`` (tells this cluster's events from those of an earlier one of that name).
    """

    name: str
    namespace: str
    state: str = ""
    reason: str = ""
    conditions: list[Condition] = field(default_factory=list)
    head: HeadInfo = field(default_factory=lambda: HeadInfo())
    endpoints: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    uid: str = ""

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> ClusterStatus:
        """Read the status of a RayCluster object as returned by the API."""
        meta = obj.get("metadata") or {}
        status = cast("RayClusterStatusDict", obj.get("status") or {})
        return cls(
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            state=status.get("state", "") or "",
            reason=status.get("reason", "") or "",
            conditions=list(status.get("conditions") or []),
            head=status.get("head") or HeadInfo(),
            endpoints={k: str(x) for k, x in (status.get("endpoints") or {}).items()},
            deleting=bool(meta.get("deletionTimestamp")),
            uid=meta.get("uid", "") or "",
        )

    def condition(self, kind: str) -> Condition | None:
        """The condition of the given type, if present."""
        return next((c for c in self.conditions if c.get("type") == kind), None)

    def condition_true(self, kind: str) -> bool:
        """Whether the condition of the given type has status ``True``."""
        found = self.condition(kind)
        return bool(found and found.get("status") == "True")

    @property
    def head_ready(self) -> bool:
        """Head pod ready: ``HeadPodReady``, or ``state == ready`` on a KubeRay without conditions."""
        if self.condition(CONDITION_HEAD_POD_READY) is not None:
            return self.condition_true(CONDITION_HEAD_POD_READY)
        return self.state == STATE_READY

    @property
    def dashboard_port(self) -> int:
        """The dashboard port KubeRay published in ``status.endpoints`` (8265 by default)."""
        raw = self.endpoints.get(DASHBOARD_PORT_NAME)
        return int(raw) if raw and str(raw).isdigit() else DEFAULT_DASHBOARD_PORT

    def summary(self) -> str:
        """One line for logs and error messages: state and every condition."""
        parts = [f"state={self.state or '<none>'}"]
        if self.reason:
            parts.append(f"reason={self.reason}")
        for cond in self.conditions:
            text = f"{cond.get('type')}={cond.get('status')}"
            if cond.get("reason") or cond.get("message"):
                text += f" ({cond.get('reason', '')}: {cond.get('message', '')})"
            parts.append(text)
        return "; ".join(parts)


@dataclass(frozen=True)
class Readiness:
    """Verdict of one look at a cluster's status: ``ready``, ``failed`` (terminal) or ``waiting``.

    The values are those of :data:`airflow_ray_provider.clusters.readiness.Verdict` (this layer cannot
    import it).
    """

    verdict: Literal["ready", "waiting", "failed"]
    message: str


def readiness(status: ClusterStatus) -> Readiness:
    """Decide from one status whether the head is ready, failed for good, or still coming up.

    ``ReplicaFailure=True`` is not terminal (KubeRay retries pod creation, e.g. after a quota frees up);
    only ``state=failed`` is. The caller's timeout bounds the wait either way.
    """
    if status.deleting:
        return Readiness("failed", f"RayCluster {status.name} is being deleted")
    if status.state == STATE_FAILED:
        return Readiness("failed", f"RayCluster {status.name} failed: {status.summary()}")
    if status.head_ready:
        return Readiness("ready", f"head of RayCluster {status.name} is ready")
    return Readiness("waiting", status.summary())


def dashboard_url(status: ClusterStatus, template: str | None = None) -> str:
    """The dashboard base URL, from a template or the head service's in-cluster DNS name.

    Template fields: ``{name}``, ``{namespace}``, ``{service_name}``, ``{service_ip}``, ``{pod_ip}``,
    ``{dashboard_port}``. The default is ``http://{service_name}.{namespace}.svc.cluster.local:{dashboard_port}``.
    """
    fields = {
        "name": status.name,
        "namespace": status.namespace,
        "service_name": status.head.get("serviceName") or f"{status.name}-head-svc",
        "service_ip": status.head.get("serviceIP", ""),
        "pod_ip": status.head.get("podIP", ""),
        "dashboard_port": status.dashboard_port,
    }
    chosen = template or "http://{service_name}.{namespace}.svc.cluster.local:{dashboard_port}"
    try:
        return chosen.format(**fields).rstrip("/")
    except (KeyError, IndexError) as exc:
        raise ValueError(
            f"dashboard URL template {chosen!r} uses an unknown field {exc}; known: {sorted(fields)}"
        ) from exc

"""What KubeRay reports, typed: RayCluster status and events, RayJob status, and the verdicts read from them
(KubeRay refuses an invalid RayCluster only by a Warning event: :func:`refusal_event` finds it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict


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


@dataclass(frozen=True)
class ClusterStatus:
    """A RayCluster's status, typed (:meth:`from_object` says where each field comes from).

    :param state: ``ready``, ``suspended``, ``failed`` or empty while provisioning.
    :param uid: tells this cluster's events from those of an earlier one of that name.
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
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        return cls(
            name=meta.get("name", ""), namespace=meta.get("namespace", ""), uid=meta.get("uid") or "",
            state=status.get("state") or "", reason=status.get("reason") or "",
            conditions=list(status.get("conditions") or []), head=status.get("head") or HeadInfo(),
            endpoints={k: str(x) for k, x in (status.get("endpoints") or {}).items()},
            deleting=bool(meta.get("deletionTimestamp")),
        )  # fmt: skip

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


def readiness(status: ClusterStatus) -> tuple[Literal["ready", "waiting", "failed"], str]:
    """Whether the head is ready, failed for good, or still coming up, and why (``ReplicaFailure=True`` is
    not terminal: KubeRay retries pod creation, e.g. after a quota frees up). The head is ready by its
    ``HeadPodReady`` condition, or by ``state == ready`` on a KubeRay without conditions."""
    head = [c.get("status") == "True" for c in status.conditions if c.get("type") == "HeadPodReady"]
    if status.deleting:
        return "failed", f"RayCluster {status.name} is being deleted"
    if status.state == "failed":
        return "failed", f"RayCluster {status.name} failed: {status.summary()}"
    if head[0] if head else status.state == "ready":
        return "ready", f"head of RayCluster {status.name} is ready"
    return "waiting", status.summary()


def dashboard_url(status: ClusterStatus, template: str | None = None) -> str:
    """The dashboard base URL, from a template or the head service's in-cluster DNS name.

    Template fields: ``{name}``, ``{namespace}``, ``{service_name}``, ``{service_ip}``, ``{pod_ip}``,
    ``{dashboard_port}``. The default is ``http://{service_name}.{namespace}.svc.cluster.local:{dashboard_port}``.
    """
    port = status.endpoints.get("dashboard", "")  # the port KubeRay published (8265 by default)
    fields = {
        "name": status.name,
        "namespace": status.namespace,
        "service_name": status.head.get("serviceName") or f"{status.name}-head-svc",
        "service_ip": status.head.get("serviceIP", ""),
        "pod_ip": status.head.get("podIP", ""),
        "dashboard_port": int(port) if port.isdigit() else 8265,
    }
    chosen = template or "http://{service_name}.{namespace}.svc.cluster.local:{dashboard_port}"
    try:
        return chosen.format(**fields).rstrip("/")
    except (KeyError, IndexError) as exc:
        raise ValueError(
            f"dashboard URL template {chosen!r} uses an unknown field {exc}; known: {sorted(fields)}"
        ) from exc


EVENT_WARNING = "Warning"
#: Reasons KubeRay's RayCluster controller records when its validation refuses the object (utils.*).
REFUSAL_REASONS = frozenset({"InvalidRayClusterMetadata", "InvalidRayClusterSpec", "InvalidRayClusterStatus"})


@dataclass(frozen=True)
class ClusterEvent:
    """One ``core/v1`` Event about a RayCluster (``uid``: which incarnation of the name it is about)."""

    type: str
    reason: str
    message: str
    count: int = 1
    uid: str = ""
    last_seen: datetime | None = None

    @classmethod
    def from_object(cls, event: dict[str, Any]) -> ClusterEvent:
        """Read an Event as the API returned it."""
        seen = event.get("lastTimestamp") or event.get("firstTimestamp")
        seen = seen or (event.get("metadata") or {}).get("creationTimestamp")
        return cls(
            type=event.get("type") or "",
            reason=event.get("reason") or "",
            message=event.get("message") or "",
            count=event.get("count") or 1,
            uid=(event.get("involvedObject") or {}).get("uid") or "",
            last_seen=datetime.fromisoformat(seen) if seen else None,
        )

    def line(self) -> str:
        """``Reason: message`` (``(xN)`` when repeated)."""
        return f"{self.reason}: {self.message}" + (f" (x{self.count})" if self.count > 1 else "")


def events_of(events: list[ClusterEvent], uid: str) -> list[ClusterEvent]:
    """The events about this incarnation of the object (an earlier one of that name had another uid)."""
    return [e for e in events if not uid or not e.uid or e.uid == uid]


def refusal_event(events: list[ClusterEvent]) -> ClusterEvent | None:
    """The Warning event by which KubeRay's controller refused the object, if any (the latest)."""
    found = [e for e in events if e.type == EVENT_WARNING and e.reason in REFUSAL_REASONS]
    return _latest(found)[0] if found else None


def warning_summary(events: list[ClusterEvent], limit: int = 3) -> str:
    """The most recent Warning events in one line (empty when there are none)."""
    warnings = _latest([e for e in events if e.type == EVENT_WARNING])[:limit]
    return "; ".join(e.line() for e in warnings)


def _latest(events: list[ClusterEvent]) -> list[ClusterEvent]:
    return sorted(events, key=lambda e: e.last_seen.timestamp() if e.last_seen else 0.0, reverse=True)


#: KubeRay's label on the RayCluster a RayJob created (``ray.io/originated-from-crd: RayJob``).
LABEL_ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"


#: The :class:`RayJobStatus` fields read as they are from a RayJob's ``status``.
_STATUS_KEYS = {
    "deployment_status": "jobDeploymentStatus", "job_status": "jobStatus", "reason": "reason",
    "message": "message", "cluster_name": "rayClusterName", "start_time": "startTime",
}  # fmt: skip


@dataclass(frozen=True)
class RayJobStatus:
    """A RayJob's status, typed (:meth:`from_object` says where each field comes from).

    :param deployment_status: ``""`` before KubeRay looked at it.
    :param job_status: Ray's job status (``""`` before the job exists).
    :param reason: ``AppFailed``, ``DeadlineExceeded``, ``SubmissionFailed``, ...
    """

    name: str
    namespace: str
    deployment_status: str = ""
    job_status: str = ""
    reason: str = ""
    message: str = ""
    job_id: str = ""
    cluster_name: str = ""
    start_time: str = ""
    failed: int = 0
    suspend: bool = False

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> RayJobStatus:
        """Read the status of a RayJob object as returned by the API."""
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        return cls(
            name=meta.get("name", ""), namespace=meta.get("namespace", ""), suspend=bool(spec.get("suspend")),
            job_id=status.get("jobId") or spec.get("jobId") or "", failed=int(status.get("failed") or 0),
            **{key: status.get(raw) or "" for key, raw in _STATUS_KEYS.items()},
        )  # fmt: skip

    @property
    def is_final(self) -> bool:
        """KubeRay will not change this RayJob again: ``Complete`` or ``Failed``."""
        return self.deployment_status in ("Complete", "Failed")

    @property
    def is_terminal(self) -> bool:
        """The Ray job ended (KubeRay's own verdict may follow a moment later); never without a Ray job."""
        return bool(self.job_id) and (self.job_status in ("SUCCEEDED", "FAILED", "STOPPED") or self.is_final)

    @property
    def is_success(self) -> bool:
        """``Complete`` with a Ray job that ``SUCCEEDED`` (``Complete`` + ``STOPPED`` is not a success)."""
        return self.deployment_status == "Complete" and self.job_status == "SUCCEEDED"

    def summary(self) -> str:
        """One line for logs and errors: deployment status, job status, reason and message."""
        parts = [
            f"jobDeploymentStatus={self.deployment_status or '<new>'}",
            f"jobStatus={self.job_status or '<none>'}",
        ]
        optional = (("reason", self.reason), ("message", self.message), ("failed attempts", self.failed))
        return "; ".join(parts + [f"{label}={value}" for label, value in optional if value])

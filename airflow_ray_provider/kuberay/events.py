"""A RayCluster's Kubernetes events, typed, and the one rule that reads KubeRay's refusal from them.

When KubeRay's controller refuses a RayCluster (a rule of ``validation.go`` that the CRD schema does not
enforce) it records a Warning event on the object and writes no status at all: without reading the events
a caller sees ``state=<none>`` until its timeout. :func:`refusal` finds that event; :func:`summary` puts
the recent Warning events into wait and timeout messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

EVENT_WARNING = "Warning"
#: Reasons KubeRay's RayCluster controller records when its validation refuses the object (utils.*).
REFUSAL_REASONS = frozenset({"InvalidRayClusterMetadata", "InvalidRayClusterSpec", "InvalidRayClusterStatus"})


@dataclass(frozen=True)
class ClusterEvent:
    """One ``core/v1`` Event about a RayCluster.

    :param type: ``Normal`` or ``Warning``.
    :param reason: a CamelCase reason such as ``InvalidRayClusterSpec``.
    :param message: the controller's text.
    :param count: how often it happened.
    :param uid: ``involvedObject.uid`` (which incarnation of the name it is about).
    :param last_seen: when it last happened.
    """

    type: str
    reason: str
    message: str
    count: int = 1
    uid: str = ""
    last_seen: datetime | None = None

    @classmethod
    def from_api(cls, event: Any) -> ClusterEvent:
        """Read a ``kubernetes.client.CoreV1Event``."""
        involved = event.involved_object
        return cls(
            type=event.type or "",
            reason=event.reason or "",
            message=event.message or "",
            count=event.count or 1,
            uid=(involved.uid if involved is not None else "") or "",
            last_seen=event.last_timestamp or event.first_timestamp or event.metadata.creation_timestamp,
        )

    def line(self) -> str:
        """``Reason: message`` (``(xN)`` when repeated)."""
        return f"{self.reason}: {self.message}" + (f" (x{self.count})" if self.count > 1 else "")


def of_object(events: list[ClusterEvent], uid: str) -> list[ClusterEvent]:
    """The events about this incarnation of the object (an earlier one of that name had another uid)."""
    return [e for e in events if not uid or not e.uid or e.uid == uid]


def refusal(events: list[ClusterEvent]) -> ClusterEvent | None:
    """The Warning event by which KubeRay's controller refused the object, if any (the latest)."""
    found = [e for e in events if e.type == EVENT_WARNING and e.reason in REFUSAL_REASONS]
    return _latest(found)[0] if found else None


def summary(events: list[ClusterEvent], limit: int = 3) -> str:
    """The most recent Warning events in one line (empty when there are none)."""
    warnings = _latest([e for e in events if e.type == EVENT_WARNING])[:limit]
    return "; ".join(e.line() for e in warnings)


def _latest(events: list[ClusterEvent]) -> list[ClusterEvent]:
    return sorted(events, key=lambda e: e.last_seen.timestamp() if e.last_seen else 0.0, reverse=True)

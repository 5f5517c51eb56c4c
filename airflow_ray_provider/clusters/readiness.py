"""When a cluster is ready, and how waiting for it ends: one typed look, one event shape, one rule.

Ready: the head is up, and its dashboard (with the token) and job agent answer. :func:`event_for` ends the
blocking wait and the trigger's alike; the event never carries the token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, get_args

from airflow_ray_provider.exceptions import RayProviderError

#: One look at a cluster: ready, still coming up, or failed for good (waiting longer will not help).
Verdict = Literal["ready", "waiting", "failed"]
#: How a wait ended.
EventStatus = Literal["ready", "failed", "timeout", "error"]

EVENT_READY: Final = "ready"
EVENT_ERROR: Final = "error"
EVENT_STATUSES: tuple[EventStatus, ...] = get_args(EventStatus)


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
    if status == EVENT_READY and not dashboard_url:
        raise ValueError("a 'ready' event needs the dashboard URL")
    return {"status": status, "message": message, "dashboard_url": dashboard_url,
            "conditions": list(conditions or [])}  # fmt: skip


def validate_event(event: Any) -> ReadinessEvent:
    """Check an event before acting on it; :class:`RayProviderError` if malformed."""
    if not isinstance(event, dict) or event.get("status") not in EVENT_STATUSES:
        raise RayProviderError(f"unexpected cluster readiness event: {event!r}")
    if event["status"] == EVENT_READY and not event.get("dashboard_url"):
        raise RayProviderError(f"cluster readiness event 'ready' without a dashboard_url: {event!r}")
    if not isinstance(event.get("conditions") or [], list):
        raise RayProviderError(f"cluster readiness event with malformed conditions: {event!r}")
    message, url = str(event.get("message") or ""), event.get("dashboard_url")
    return make_event(event["status"], message=message, dashboard_url=url, conditions=event.get("conditions"))


def event_for(check: ReadinessCheck, *, waited: float, timeout: float) -> ReadinessEvent | None:
    """The one rule: how the latest look ends a wait of ``waited`` of ``timeout`` s (``None``: wait on)."""
    if check.verdict == "ready":
        return make_event(EVENT_READY, message=check.message, dashboard_url=check.dashboard_url)
    if check.verdict == "failed":
        return make_event("failed", message=check.message, conditions=check.conditions)
    if waited >= timeout:
        text = f"{check.cluster} was not ready after {timeout:.0f}s: {check.message}.{check.details()}"
        return make_event("timeout", message=text, conditions=check.conditions)
    return None


def probe_dashboard(url: str, token: str | None, timeout: float = 5.0) -> tuple[bool, str]:
    """Whether the dashboard answers ``/api/version`` with the token: ``(True, ray_version)`` or
    ``(False, why)``."""
    from airflow_ray_provider.exceptions import RayJobApiError
    from airflow_ray_provider.jobs.client import JobClient

    try:
        return True, JobClient(url, token=token, timeout=timeout, retry_attempts=1).version()
    except RayJobApiError as exc:
        return False, f"HTTP {exc.http_status}"
    except Exception as exc:
        return False, str(exc.__cause__ or exc)

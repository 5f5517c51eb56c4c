"""When a cluster is ready, and how waiting for it ends: one typed look, one event shape, one rule.

Ready means the head is up AND the dashboard's ``/api/version`` answers with the token: KubeRay marks
the head ready before the dashboard has finished starting, and job submitters that race it get
connection errors. The head is up only once its job agent answers too (KubeRay's default head readiness
probe asks the agent's ``/api/local_raylet_healthz``; the local backend asks the same): before that, the Job
API refuses submissions with "No available agent to submit job". A backend's ``check`` returns a
:class:`ReadinessCheck`; :func:`event_for` turns it into the end of the wait (or ``None``: keep
waiting). The sync wait (:func:`wait_until_ready`), the deferrable trigger and the operator's
``execute_complete`` all go through these functions, so a cluster that times out reads the same
however it was waited on.

Event payload (:class:`ReadinessEvent`): ``{"status": "ready" | "failed" | "timeout" | "error",
"message", "dashboard_url", "conditions"}``. It never carries the token.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, get_args

from airflow_ray_provider.exceptions import RayProviderError

log = logging.getLogger(__name__)

#: One look at a cluster: ready, still coming up, or failed for good (waiting longer will not help).
Verdict = Literal["ready", "waiting", "failed"]
#: How a wait ended.
EventStatus = Literal["ready", "failed", "timeout", "error"]

EVENT_READY: Final = "ready"
EVENT_FAILED: Final = "failed"
EVENT_TIMEOUT: Final = "timeout"
EVENT_ERROR: Final = "error"
EVENT_STATUSES: tuple[EventStatus, ...] = get_args(EventStatus)


@dataclass(frozen=True)
class ReadinessCheck:
    """One look at a cluster.

    :param verdict: ``ready``, ``waiting`` or ``failed``.
    :param message: what was seen, for logs and errors.
    :param cluster: what was looked at, e.g. ``RayCluster ray/nightly-1a2b`` or ``local Ray head x``.
    :param dashboard_url: the dashboard's base URL, once known.
    :param state: one line of the cluster's last observed state (KubeRay: state and every condition).
    :param conditions: the cluster's conditions (KubeRay ``status.conditions``).
    :param inspect: a command that shows more, e.g. ``kubectl describe raycluster x -n ray``.
    """

    verdict: Verdict
    message: str
    cluster: str
    dashboard_url: str | None = None
    state: str = ""
    conditions: list[dict[str, Any]] = field(default_factory=list)
    inspect: str = ""


class ReadinessEvent(TypedDict):
    """How waiting for a cluster ended (the trigger's event payload, also built by the sync wait)."""

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
    return {
        "status": status,
        "message": message,
        "dashboard_url": dashboard_url,
        "conditions": list(conditions or []),
    }


def validate_event(event: Any) -> ReadinessEvent:
    """Check an event before acting on it (``execute_complete``); fills keys older events lacked.

    :raises RayProviderError: for anything that is not a well-formed readiness event.
    """
    if not isinstance(event, dict) or event.get("status") not in EVENT_STATUSES:
        raise RayProviderError(f"unexpected cluster readiness event: {event!r}")
    if event["status"] == EVENT_READY and not event.get("dashboard_url"):
        raise RayProviderError(f"cluster readiness event 'ready' without a dashboard_url: {event!r}")
    conditions = event.get("conditions") or []
    if not isinstance(conditions, list):
        raise RayProviderError(f"cluster readiness event with malformed conditions: {event!r}")
    return make_event(
        event["status"],
        message=str(event.get("message") or ""),
        dashboard_url=event.get("dashboard_url"),
        conditions=conditions,
    )


def timeout_message(check: ReadinessCheck, timeout: float) -> str:
    """The error text for a cluster that did not become ready: last state, conditions, what to run."""
    text = f"{check.cluster} was not ready after {timeout:.0f}s: {check.message}."
    text += f" Last status: {check.state or 'no status'}."
    return text + (f" Inspect it with: {check.inspect}" if check.inspect else "")


def event_for(check: ReadinessCheck, *, waited: float, timeout: float) -> ReadinessEvent | None:
    """The one rule: how a look ends the wait, or ``None`` to keep waiting.

    :param check: the latest look.
    :param waited: seconds since waiting began.
    :param timeout: seconds to wait at most.
    """
    if check.verdict == "ready":
        return make_event(EVENT_READY, message=check.message, dashboard_url=check.dashboard_url)
    if check.verdict == "failed":
        return make_event(EVENT_FAILED, message=check.message, conditions=check.conditions)
    if waited >= timeout:
        return make_event(EVENT_TIMEOUT, message=timeout_message(check, timeout), conditions=check.conditions)
    return None


def wait_until_ready(
    check: Callable[[], ReadinessCheck], *, timeout: float, poll_interval: float
) -> ReadinessEvent:
    """Look until :func:`event_for` ends the wait, sleeping ``poll_interval`` between looks.

    :param check: one look at the cluster (a backend's ``check`` bound to its plan).
    :returns: the final event: ``ready``, ``failed`` or ``timeout``. Errors of ``check`` propagate.
    """
    start = time.monotonic()
    while True:
        result = check()
        event = event_for(result, waited=time.monotonic() - start, timeout=timeout)
        if event is not None:
            return event
        log.info("%s not ready yet: %s", result.cluster, result.message)
        time.sleep(poll_interval)


def probe_dashboard(url: str, token: str | None, timeout: float = 5.0) -> tuple[bool, str]:
    """GET ``<url>/api/version``; returns ``(True, ray_version)`` or ``(False, why)``."""
    request = urllib.request.Request(f"{url}/api/version")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return True, str(json.load(response).get("ray_version", "?"))
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, str(getattr(exc, "reason", exc))

"""Ready means: the head pod is ready AND the dashboard's ``/api/version`` answers (with the token).

KubeRay marks the head ready before the dashboard has finished starting, and job submitters that race
it get connection errors; so both are checked. :func:`check_ready` is one look; the sync wait loop and
the deferrable trigger (through a worker thread) both call it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_ray_provider.kuberay.errors import KubeRayError, KubeRayNotFoundError, KubeRayTimeoutError
from airflow_ray_provider.kuberay.status import ClusterStatus, dashboard_url, readiness

if TYPE_CHECKING:
    from airflow_ray_provider.kuberay.builder import TokenRef
    from airflow_ray_provider.kuberay.client import KubeRayClient


@dataclass(frozen=True)
class ReadyCheck:
    """One look at a cluster: ``verdict`` is ``ready``, ``waiting`` or ``failed``."""

    verdict: str
    message: str
    status: ClusterStatus | None = None
    dashboard_url: str | None = None

    @property
    def conditions(self) -> list[dict]:
        """The cluster's conditions at this look (for error messages and events)."""
        return [dict(c) for c in self.status.conditions] if self.status else []


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


def check_ready(
    client: KubeRayClient,
    name: str,
    *,
    namespace: str,
    dashboard_url_template: str | None = None,
    token_ref: TokenRef | None = None,
) -> ReadyCheck:
    """Look once at the cluster, then (when its head is ready) at its dashboard."""
    status = client.get_status(name, namespace=namespace)
    verdict = readiness(status)
    if verdict.verdict != "ready":
        return ReadyCheck(verdict.verdict, verdict.message, status)
    url = dashboard_url(status, dashboard_url_template)
    token = None
    if token_ref is not None:
        try:
            token = client.read_secret_value(token_ref.secret_name, key=token_ref.key, namespace=namespace)
        except KubeRayNotFoundError:
            return ReadyCheck(
                "waiting", f"token Secret {token_ref.secret_name} does not exist yet", status, url
            )
    answered, detail = probe_dashboard(url, token)
    if answered:
        return ReadyCheck("ready", f"dashboard {url} answers (Ray {detail})", status, url)
    return ReadyCheck("waiting", f"head ready, but {url}/api/version: {detail}", status, url)


def wait_ready(
    client: KubeRayClient,
    name: str,
    *,
    namespace: str,
    timeout: float,
    poll_interval: float = 2.0,
    dashboard_url_template: str | None = None,
    token_ref: TokenRef | None = None,
) -> ReadyCheck:
    """Poll :func:`check_ready` until ready.

    :raises KubeRayTimeoutError: after ``timeout`` seconds, with the last conditions.
    :raises KubeRayError: when the cluster failed for good.
    """
    deadline = time.monotonic() + timeout
    while True:
        check = check_ready(
            client,
            name,
            namespace=namespace,
            dashboard_url_template=dashboard_url_template,
            token_ref=token_ref,
        )
        if check.verdict == "ready":
            return check
        if check.verdict == "failed":
            raise KubeRayError(check.message)
        if time.monotonic() >= deadline:
            raise KubeRayTimeoutError(
                timeout_message(name, namespace, timeout, check), conditions=check.conditions
            )
        time.sleep(poll_interval)


def timeout_message(name: str, namespace: str, timeout: float, check: ReadyCheck) -> str:
    """The error text for a cluster that did not become ready: last state, conditions, what to run."""
    summary = check.status.summary() if check.status else "no status"
    return (
        f"RayCluster {namespace}/{name} was not ready after {timeout:.0f}s: {check.message}. "
        f"Last status: {summary}. Inspect it with: kubectl describe raycluster {name} -n {namespace}"
    )

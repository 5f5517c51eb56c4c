"""A thin typed client for KubeRay RayClusters over the official ``kubernetes`` client (no Airflow imports).

The Kubernetes ``ApiClient`` is injected, so the caller decides how to authenticate (in-cluster,
kubeconfig file or dict) and nothing global is loaded. Every call stays inside the namespaced Role in
:mod:`airflow_ray_provider.kuberay.rbac`.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, wait_exponential

from airflow_ray_provider.kuberay.errors import (
    KubeRayApiError,
    KubeRayConflictError,
    KubeRayError,
    KubeRayNotFoundError,
    KubeRayTimeoutError,
)
from airflow_ray_provider.kuberay.events import ClusterEvent
from airflow_ray_provider.kuberay.labels import matches, selector
from airflow_ray_provider.kuberay.status import ClusterStatus

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
TRANSIENT_STATUS = frozenset({0, 408, 429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Whether a Kubernetes call failed in a way worth retrying (no answer, 408, 429, 5xx)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(exc, ApiException):
        return (exc.status or 0) in TRANSIENT_STATUS
    return isinstance(exc, (Urllib3Error, ConnectionError, TimeoutError))


def _translate(exc: Exception, what: str) -> KubeRayError:
    from kubernetes.client.exceptions import ApiException

    if not isinstance(exc, ApiException):
        return KubeRayApiError(f"{what}: {exc}")
    status, reason = exc.status or 0, exc.reason or ""
    message = f"{what}: HTTP {status} {reason}: {(exc.body or '')[:500]}"
    if status == 404:
        return KubeRayNotFoundError(message, status=status, reason=reason)
    if status == 409:
        return KubeRayConflictError(message, status=status, reason=reason)
    if status in (401, 403):
        message += (
            " (check the connection's credentials and that its Role allows this;"
            " see docs/connections.md, 'Least privilege')"
        )
    return KubeRayApiError(message, status=status, reason=reason)


class KubeRayClient:
    """RayCluster create / get / delete / list / wait until gone, its events, and the token Secret.

    :param api_client: a configured ``kubernetes.client.ApiClient``.
    :param namespace: default namespace of every call.
    :param request_timeout: seconds per HTTP request.
    :param retries: attempts for transient failures.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        namespace: str = "default",
        request_timeout: float = 30.0,
        retries: int = 4,
    ) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.retries = retries

    def _custom(self) -> CustomObjectsApi:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.api_client)

    def _core(self) -> CoreV1Api:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api_client)

    def _call(self, what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.request_timeout)
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential(multiplier=0.5, max=8),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )
        try:
            return retrying(func, *args, **kwargs)
        except Exception as exc:
            raise _translate(exc, what) from exc

    # RayCluster
    def create_cluster(self, body: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create a RayCluster; raises :class:`KubeRayConflictError` when the name is taken."""
        ns = namespace or body.get("metadata", {}).get("namespace") or self.namespace
        name = body.get("metadata", {}).get("name")
        return self._call(
            f"create RayCluster {ns}/{name}",
            self._custom().create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body,
        )  # fmt: skip

    def get_cluster(self, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """Read a RayCluster; raises :class:`KubeRayNotFoundError` when absent."""
        ns = namespace or self.namespace
        return self._call(
            f"get RayCluster {ns}/{name}",
            self._custom().get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
        )  # fmt: skip

    def find_cluster(self, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """Read a RayCluster, or ``None`` when it does not exist."""
        try:
            return self.get_cluster(name, namespace=namespace)
        except KubeRayNotFoundError:
            return None

    def get_status(self, name: str, *, namespace: str | None = None) -> ClusterStatus:
        """The typed status of a RayCluster."""
        return ClusterStatus.from_object(self.get_cluster(name, namespace=namespace))

    def delete_cluster(self, name: str, *, namespace: str | None = None) -> bool:
        """Delete a RayCluster (foreground: its pods go first). Returns ``False`` if it was already gone."""
        ns = namespace or self.namespace
        try:
            self._call(
                f"delete RayCluster {ns}/{name}",
                self._custom().delete_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
                propagation_policy="Foreground",
            )  # fmt: skip
        except KubeRayNotFoundError:
            return False
        return True

    def list_clusters(
        self, labels: dict[str, str] | None = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """List RayClusters whose labels include ``labels``.

        The selector goes to the server and is applied again here, so a server (or emulator) that
        ignores it cannot widen the result.
        """
        ns = namespace or self.namespace
        kwargs = {"label_selector": selector(labels)} if labels else {}
        result = self._call(
            f"list RayClusters in {ns}",
            self._custom().list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, **kwargs,
        )  # fmt: skip
        return [item for item in result.get("items", []) if matches(item, labels or {})]

    def wait_until_gone(
        self, name: str, *, namespace: str | None = None, timeout: float = 300.0, poll_interval: float = 1.0
    ) -> None:
        """Poll until the RayCluster no longer exists; raises :class:`KubeRayTimeoutError` otherwise."""
        deadline = time.monotonic() + timeout
        ns = namespace or self.namespace
        while self.find_cluster(name, namespace=ns) is not None:
            if time.monotonic() >= deadline:
                raise KubeRayTimeoutError(
                    f"RayCluster {ns}/{name} still exists {timeout:.0f}s after delete; "
                    f"check its finalizers: kubectl describe raycluster {name} -n {ns}"
                )
            time.sleep(poll_interval)

    # Events (KubeRay's refusals and pod failures)
    def list_events(self, name: str, *, namespace: str | None = None) -> list[ClusterEvent]:
        """The events about the RayCluster ``name`` (filtered here too, like :meth:`list_clusters`)."""
        ns = namespace or self.namespace
        result = self._call(
            f"list events of RayCluster {ns}/{name}",
            self._core().list_namespaced_event, ns,
            field_selector=f"involvedObject.kind=RayCluster,involvedObject.name={name}",
        )  # fmt: skip
        return [
            ClusterEvent.from_api(item)
            for item in result.items or []
            if item.involved_object is not None
            and item.involved_object.kind == "RayCluster"
            and item.involved_object.name == name
        ]

    # Secrets (the Ray auth token)
    def read_secret_value(self, name: str, *, key: str, namespace: str | None = None) -> str:
        """Read one key of a Secret, decoded; raises :class:`KubeRayError` when the key is missing."""
        ns = namespace or self.namespace
        secret = self._call(f"read Secret {ns}/{name}", self._core().read_namespaced_secret, name, ns)
        data = secret.data or {}
        if key not in data:
            raise KubeRayError(f"Secret {ns}/{name} has no key {key!r} (keys: {sorted(data)})")
        return base64.b64decode(data[key]).decode()

    def create_secret(
        self, name: str, *, data: dict[str, str], labels: dict[str, str], namespace: str | None = None
    ) -> None:
        """Create an Opaque Secret (used only in ``secret`` auth mode); an existing one is kept."""
        ns = namespace or self.namespace
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
        }
        try:
            self._call(f"create Secret {ns}/{name}", self._core().create_namespaced_secret, ns, body)
        except KubeRayConflictError:
            log.info("Secret %s/%s already exists (an earlier try created it); keeping it", ns, name)

    def delete_secret(self, name: str, *, namespace: str | None = None) -> bool:
        """Delete a Secret; ``False`` if it was already gone."""
        ns = namespace or self.namespace
        try:
            self._call(f"delete Secret {ns}/{name}", self._core().delete_namespaced_secret, name, ns)
        except KubeRayNotFoundError:
            return False
        return True

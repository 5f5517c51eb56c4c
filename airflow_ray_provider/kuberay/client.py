"""RayCluster, RayJob, Secret and Lease verbs over an injected ``kubernetes`` ``ApiClient`` (transient
failures retried, every call inside the Role of :func:`role_manifest`), and the ownership labels that tie
a cluster to its task (a run id is too long for a label, so it is hashed there).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import logging
import re
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, wait_exponential

from airflow_ray_provider.kuberay.status import ClusterEvent
from airflow_ray_provider.kuberay.validation import KubeRayError, check_cluster_name

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

GROUP, VERSION = "ray.io", "v1"
TRANSIENT_STATUS = frozenset({0, 408, 429, 500, 502, 503, 504})
# The token Secret KubeRay generates is read; events are read because KubeRay refuses an invalid RayCluster
# only by a Warning event; Leases keep pools (:mod:`.leases`; a replace is ``update``).
BASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [group], "resources": [resource], "verbs": verbs}
    for group, resource, verbs in (
        ("ray.io", "rayclusters", ["create", "get", "list", "delete"]),
        ("ray.io", "rayjobs", ["create", "get", "list", "patch", "delete"]),
        ("", "secrets", ["get"]),
        ("", "events", ["get", "list"]),
        ("coordination.k8s.io", "leases", ["create", "get", "list", "update", "delete"]),
    )
]
CREATED_BY = "airflow-ray-provider"
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
LABEL_DAG_ID = "airflow-ray-provider/dag-id"
LABEL_RUN_HASH = "airflow-ray-provider/run-hash"
LABEL_TASK_ID = "airflow-ray-provider/task-id"
ANNOTATION_EXPIRES_AT = "airflow-ray-provider/expires-at"
ANNOTATION_RUN_ID = "airflow-ray-provider/run-id"
GENERATED_NAME_MAX = 40  # KubeRay derives longer names (services, pods) from it; keep headroom under 63

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def _short_hash(text: str, length: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 chars, alphanumeric at both ends); long values keep a hash."""
    value = _LABEL_VALUE_BAD.sub("-", text).strip("-_.")
    if len(value) > 63:
        value = f"{value[:52].rstrip('-_.')}-{_short_hash(text)}"
    return value


def generate_name(*, prefix: str, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """A DNS-1035 name (``prefix`` starts with a letter), stable for one task of a run, unique across runs."""
    digest = _short_hash(f"{dag_id}\x00{run_id}\x00{task_id}\x00{map_index}")
    slug = re.sub(r"[^a-z0-9]+", "-", f"{prefix}-{dag_id}".lower()).strip("-")
    name = f"{slug[: GENERATED_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"
    check_cluster_name(name)
    return name


def ownership_labels(*, dag_id: str, run_id: str, task_id: str) -> dict[str, str]:
    """Labels that mark a cluster as created by this provider for one task of one DAG run."""
    return {
        LABEL_CREATED_BY: CREATED_BY,
        LABEL_DAG_ID: _label_value(dag_id),
        LABEL_RUN_HASH: _short_hash(run_id),
        LABEL_TASK_ID: _label_value(task_id),
    }


def ownership_annotations(*, run_id: str, expires_at: datetime) -> dict[str, str]:
    """Annotations with the full run id and the time (RFC 3339 UTC) after which a janitor may delete it."""
    expiry = expires_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {ANNOTATION_RUN_ID: run_id, ANNOTATION_EXPIRES_AT: expiry}


def selector(labels: dict[str, str]) -> str:
    """Render labels as an equality label selector (``a=b,c=d``)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def matches(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether an object's labels include every ``labels`` item (client-side selector filtering)."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def is_expired(obj: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether an object's expiry annotation has passed (no valid annotation: it never expires)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EXPIRES_AT)
    try:
        expiry = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:  # none, or not a time
        return False
    expiry = expiry if expiry.tzinfo else expiry.replace(tzinfo=timezone.utc)
    return expiry <= (now or datetime.now(timezone.utc))


class KubeRayApiError(KubeRayError):
    """The Kubernetes API answered with an error that retrying will not fix (``status`` 0: no answer)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeRayNotFoundError(KubeRayApiError):
    """The object does not exist (HTTP 404)."""


class KubeRayConflictError(KubeRayApiError):
    """The object already exists (HTTP 409)."""


class KubeRayTimeoutError(KubeRayError):
    """A wait ran out of time (an object still there after its delete)."""


def role_manifest(namespace: str, *, name: str = "airflow-ray-provider", secret_mode: bool = False) -> dict:
    """The ``rbac.authorization.k8s.io/v1`` Role to bind to Airflow's service account in ``namespace``."""
    rules = copy.deepcopy(BASE_RULES)
    if secret_mode:  # auth="secret" (KubeRay without authOptions): the provider creates and deletes it
        rules.append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"]})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": rules,
    }


def is_transient(exc: BaseException) -> bool:
    """Whether a Kubernetes call failed in a way worth retrying (no answer, 408, 429, 5xx)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(exc, ApiException):
        return (exc.status or 0) in TRANSIENT_STATUS
    return isinstance(exc, (Urllib3Error, ConnectionError, TimeoutError))


class _Objects:
    """The verbs of one namespaced kind through a :class:`KubeRayClient`; answers are plain data."""

    KIND: str
    PLURAL = ""  # a ray.io/v1 kind's plural; empty: a built-in kind, served by API
    API = "CustomObjectsApi"
    PROPAGATION = "Background"  # what a delete does with what the object owns

    def __init__(self, client: KubeRayClient, namespace: str | None = None) -> None:
        self.kube = client
        self.namespace: str = namespace or client.namespace

    def _run(self, verb: str, ns: str | None, name: str | None, *args: Any, **kwargs: Any) -> Any:
        """Call ``verb`` (``get``, ``list``, ...) with the client's timeout, retrying transient failures;
        errors become :class:`KubeRayApiError` (and subclasses) naming the call."""
        import kubernetes.client

        ns = ns or self.namespace
        what = f"{verb} {self.KIND} {ns}/{name}" if name else f"{verb} {self.KIND}s in {ns}"
        api = getattr(kubernetes.client, self.API)(self.kube.api_client)
        named = (name,) if name and verb != "create" else ()
        if self.PLURAL:
            method = getattr(api, f"{verb}_namespaced_custom_object")
            args = (GROUP, VERSION, ns, self.PLURAL, *named, *args)
        else:
            method = getattr(api, f"{'read' if verb == 'get' else verb}_namespaced_{self.KIND.lower()}")
            args = (*named, ns, *args)
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(self.kube.RETRIES),
            wait=wait_exponential(multiplier=0.5, max=8),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )
        try:
            answer = retrying(method, *args, _request_timeout=self.kube.REQUEST_TIMEOUT, **kwargs)
        except kubernetes.client.ApiException as exc:
            status, reason = exc.status or 0, exc.reason or ""
            message = f"{what}: HTTP {status} {reason}: {(exc.body or '')[:500]}"
            if status in (401, 403):
                message += (
                    " (check the connection's credentials and that its Role allows this;"
                    " see docs/connections.md, 'Least privilege')"
                )
            error = {404: KubeRayNotFoundError, 409: KubeRayConflictError}.get(status, KubeRayApiError)
            raise error(message, status=status, reason=reason) from exc
        except Exception as exc:
            raise KubeRayApiError(f"{what}: {exc}") from exc
        return self.kube.api_client.sanitize_for_serialization(answer)

    def create(self, body: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create one; raises :class:`KubeRayConflictError` when the name is taken."""
        metadata = body.get("metadata") or {}
        return self._run("create", namespace or metadata.get("namespace"), metadata.get("name"), body)

    def get(self, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """Read one; raises :class:`KubeRayNotFoundError` when absent."""
        return self._run("get", namespace, name)

    def find(self, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """Read one, or ``None`` when it does not exist."""
        try:
            return self.get(name, namespace=namespace)
        except KubeRayNotFoundError:
            return None

    def patch(self, name: str, patch: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Merge-patch one (``spec.suspend``, annotations)."""
        return self._run("patch", namespace, name, patch)

    def replace(self, name: str, body: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Replace one; raises :class:`KubeRayConflictError` when it changed since ``body`` was read."""
        return self._run("replace", namespace, name, body)

    def delete(self, name: str, *, namespace: str | None = None, **options: Any) -> bool:
        """Delete one (and, by :attr:`PROPAGATION`, what it owns); ``False`` if it was already gone."""
        try:
            self._run("delete", namespace, name, propagation_policy=self.PROPAGATION, **options)
        except KubeRayNotFoundError:
            return False
        return True

    def list_labelled(
        self, labels: dict[str, str] | None = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Those whose labels include ``labels``: the selector goes to the server and is applied again
        here, so a server (or emulator) that ignores it cannot widen the result."""
        kwargs = {"label_selector": selector(labels)} if labels else {}
        result = self._run("list", namespace, None, **kwargs)
        return [item for item in result.get("items", []) if matches(item, labels or {})]

    def wait_until_gone(self, name: str, *, namespace: str | None = None, timeout: float = 300.0) -> None:
        """Poll (twice a second) until it no longer exists; raises :class:`KubeRayTimeoutError` otherwise."""
        ns = namespace or self.namespace
        deadline = time.monotonic() + timeout
        while self.find(name, namespace=ns) is not None:
            if time.monotonic() >= deadline:
                raise KubeRayTimeoutError(
                    f"{self.KIND} {ns}/{name} still exists {timeout:.0f}s after delete; check its "
                    f"finalizers: kubectl describe {self.KIND.lower()} {name} -n {ns}"
                )
            time.sleep(0.5)


class RayJobClient(_Objects):
    """RayJobs; deleting one deletes (in the background) the cluster and submitter it owns."""

    KIND, PLURAL = "RayJob", "rayjobs"


class _Secrets(_Objects):
    KIND, API = "Secret", "CoreV1Api"


class _Events(_Objects):
    KIND, API = "Event", "CoreV1Api"


class KubeRayClient(_Objects):
    """RayClusters (deleting one is foreground: its pods go first), their events, and Secrets."""

    KIND, PLURAL, PROPAGATION = "RayCluster", "rayclusters", "Foreground"
    REQUEST_TIMEOUT = 30.0  # seconds per HTTP request
    RETRIES = 4  # attempts for transient failures

    def __init__(self, api_client: ApiClient, *, namespace: str = "default") -> None:
        self.api_client, self.namespace = api_client, namespace
        super().__init__(self, namespace)
        self.secrets, self.events = _Secrets(self), _Events(self)

    def list_events(self, name: str, *, namespace: str | None = None) -> list[ClusterEvent]:
        """The events about the RayCluster ``name`` (filtered here too, like :meth:`list_labelled`)."""
        about = {"kind": "RayCluster", "name": name}
        selector = f"involvedObject.kind=RayCluster,involvedObject.name={name}"
        result = self.events._run("list", namespace, None, field_selector=selector)
        return [
            ClusterEvent.from_object(item)
            for item in result.get("items") or []
            if about.items() <= (item.get("involvedObject") or {}).items()
        ]

    def read_secret_value(self, name: str, *, key: str, namespace: str | None = None) -> str:
        """Read one key of a Secret, decoded; raises :class:`KubeRayError` when the key is missing."""
        data = self.secrets.get(name, namespace=namespace).get("data") or {}
        if key not in data:
            where = f"{namespace or self.namespace}/{name}"
            raise KubeRayError(f"Secret {where} has no key {key!r} (keys: {sorted(data)})")
        return base64.b64decode(data[key]).decode()

    def create_secret(
        self,
        name: str,
        *,
        data: dict[str, str],
        labels: dict[str, str],
        namespace: str | None = None,
        owner: dict[str, Any] | None = None,
    ) -> None:
        """Create an Opaque Secret (deleted with ``owner``, an object as the API returned it); one an earlier
        try created is kept."""
        ns = namespace or self.namespace
        metadata: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
        if owner is not None:
            meta = owner.get("metadata") or {}
            reference = {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind")}
            reference.update(name=meta.get("name"), uid=meta.get("uid"), blockOwnerDeletion=False)
            metadata["ownerReferences"] = [reference]
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": metadata,
            "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
        }
        try:
            self.secrets.create(body)
        except KubeRayConflictError:
            log.info("Secret %s/%s already exists (an earlier try created it); keeping it", ns, name)

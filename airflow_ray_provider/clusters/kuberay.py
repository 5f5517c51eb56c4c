"""The KubeRay backend: a RayCluster CR through a ``kuberay`` connection (its typed client, within its
namespaced Role), the token in a Secret; ready once the head pod is ready AND its dashboard answers.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters.backend import (
    EXTRA_LINK_URL,
    BackendName,
    ClusterBackend,
    ClusterPlan,
    ClusterRequest,
    RayClusterHandle,
    ReadinessCheck,
    RunCluster,
    TaskIdentity,
    Verdict,
    probe_dashboard,
)
from airflow_ray_provider.exceptions import RayClusterError, RayInvalidInputError
from airflow_ray_provider.kuberay import (
    AUTH_TOKEN_KEY,
    CREATED_BY,
    LABEL_CREATED_BY,
    LABEL_ORIGINATED_FROM_CRD,
    ClusterEvent,
    ClusterStatus,
    KubeRayApiError,
    KubeRayConflictError,
    KubeRayLeaseStore,
    KubeRayNotFoundError,
    KubeRaySpecError,
    RayClusterSpec,
    TokenRef,
    build_body,
    check_name,
    dashboard_url,
    events_of,
    is_expired,
    matches,
    ownership_annotations,
    prepare_manifest,
    readiness,
    refusal_event,
    selector,
    token_ref_of,
    warning_summary,
)

if TYPE_CHECKING:
    from airflow_ray_provider.kuberay import KubeRayClient

log = logging.getLogger(__name__)

#: Names the token Secret the provider created (``secret`` auth mode), so deleting finds it.
ANNOTATION_TOKEN_SECRET = "airflow-ray-provider/token-secret"
#: ``extra`` key of a handle: whether the provider created the token Secret (then it deletes it too).
EXTRA_TOKEN_SECRET_CREATED = "token_secret_created"


@dataclass(frozen=True)
class KubeRaySettings:
    """What a ``kuberay`` connection says about the clusters it creates: the image and auth mode
    (``auth_options``, ``secret``, ``disabled``) when a spec names none, how Airflow reaches a dashboard
    (``None``: in-cluster DNS) and how people do (``link_url_template``, e.g.
    ``https://ray.example.com/{namespace}/{name}``; ``None``: as Airflow)."""

    conn_id: str
    namespace: str = "default"
    default_image: str | None = None
    dashboard_url_template: str | None = None
    ray_auth: str = "auth_options"
    link_url_template: str | None = None


@dataclass(frozen=True)
class KubeRayPlan(ClusterPlan):
    """A RayCluster to create: the body sent to the API."""

    body: dict[str, Any] = field(default_factory=dict)


def cluster_link_url(template: str, name: str, namespace: str) -> str:
    """A cluster's dashboard address for people, from the connection's ``link_url_template`` (only
    ``{name}`` and ``{namespace}``, an http(s) URL; else :class:`RayInvalidInputError` naming the extra)."""
    try:
        url = template.format(name=name, namespace=namespace).rstrip("/")
    except (KeyError, IndexError, ValueError) as exc:
        raise RayInvalidInputError(
            f"kuberay connection extra link_url_template {template!r} is not a template of {{name}} and "
            f"{{namespace}} ({exc!r}); e.g. https://ray.example.com/{{namespace}}/{{name}}"
        ) from exc
    if not url.startswith(("http://", "https://")):
        raise RayInvalidInputError(
            f"kuberay connection extra link_url_template {template!r} must give an http(s) URL, got {url!r}"
        )
    return url


def _token_ref_of_handle(handle: RayClusterHandle) -> TokenRef | None:
    if not handle.auth_token_secret:
        return None
    created = bool((handle.extra or {}).get(EXTRA_TOKEN_SECRET_CREATED))
    return TokenRef(handle.auth_token_secret, handle.auth_token_secret_key or AUTH_TOKEN_KEY, created)


def _look(
    status: ClusterStatus, verdict: Verdict, message: str, url: str | None = None,
    events: list[ClusterEvent] | None = None,
) -> ReadinessCheck:  # fmt: skip
    warnings = warning_summary(events or [])
    state = status.summary() + (f"; recent Warning events: {warnings}" if warnings else "")
    return ReadinessCheck(
        verdict, message, f"RayCluster {status.namespace}/{status.name}", url, state=state,
        conditions=[dict(c) for c in status.conditions],
        inspect=f"kubectl describe raycluster {status.name} -n {status.namespace}",
    )  # fmt: skip


class KubeRayBackend(ClusterBackend):
    """Create, wait for and delete RayClusters through one ``kuberay`` connection (the client is built on
    first use: no I/O before a backend call)."""

    kind: BackendName = "kuberay"
    can_defer: bool = True

    def __init__(self, settings: KubeRaySettings, client_factory: Callable[[], KubeRayClient]) -> None:
        self.settings = settings
        self.conn_id: str | None = settings.conn_id
        self._client_factory = client_factory

    @cached_property
    def client(self) -> KubeRayClient:
        """The typed RayCluster client."""
        return self._client_factory()

    def _namespace(self, plan: ClusterPlan | RayClusterHandle) -> str:
        return plan.namespace or self.settings.namespace

    # ----------------------------------------------------------------- create
    def plan(self, request: ClusterRequest, identity: TaskIdentity) -> KubeRayPlan:
        """Validate the request and build the body; no API call."""
        namespace = request.namespace or self.settings.namespace
        template = request.dashboard_url_template or self.settings.dashboard_url_template
        labels = identity.labels()
        expiry = datetime.now(timezone.utc) + request.expiry
        annotations = ownership_annotations(run_id=identity.run_id, expires_at=expiry)
        name = request.name_for(identity)
        try:
            check_name(namespace, "the operator's namespace" if request.namespace
                            else f"connection {self.conn_id!r}: Extra namespace")  # fmt: skip
            dashboard_url(ClusterStatus(name=name, namespace=namespace), template)  # a bad field fails now
            body = self.body(request.spec, request.manifest, name=name, namespace=namespace, labels=labels,
                             annotations=annotations)  # fmt: skip
        except (KubeRaySpecError, ValueError) as exc:
            raise RayInvalidInputError(str(exc)) from exc
        token_ref = token_ref_of(body)
        if token_ref is not None and token_ref.provider_created:
            body["metadata"]["annotations"][ANNOTATION_TOKEN_SECRET] = token_ref.secret_name
        return KubeRayPlan(
            name=body["metadata"]["name"], namespace=namespace, labels=labels,
            dashboard_url_template=template, token_ref=token_ref, body=body,
        )  # fmt: skip

    def body(
        self, spec: RayClusterSpec | None, manifest: dict[str, Any] | str | None, *, name: str,
        namespace: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The RayCluster body of a user's manifest, else of a spec (KubeRaySpecError: a bad field)."""
        if manifest is not None:
            return prepare_manifest(
                manifest, name=name, namespace=namespace, labels=labels or {}, annotations=annotations or {}
            )
        spec = spec or RayClusterSpec()
        spec = dataclasses.replace(spec, auth=spec.auth or self.settings.ray_auth)
        return build_body(spec, name=name, namespace=namespace, labels=labels, annotations=annotations,
                          default_image=self.settings.default_image)  # fmt: skip

    def ensure(self, plan: ClusterPlan) -> bool:
        """Create the RayCluster (and, in ``secret`` mode, its token Secret), or reuse this task's."""
        assert isinstance(plan, KubeRayPlan), plan
        namespace = self._namespace(plan)
        existing = self.client.find(plan.name, namespace=namespace)
        if existing is not None:
            check_ours(existing, plan.labels)
            log.info("Reusing RayCluster %s/%s created by an earlier try", namespace, plan.name)
            return False
        ref = plan.token_ref
        if ref is not None and ref.provider_created:
            data = {ref.key: secrets.token_hex(32)}
            self.client.create_secret(ref.secret_name, data=data, labels=plan.labels, namespace=namespace)
        try:
            self.client.create(plan.body, namespace=namespace)
        except KubeRayConflictError:  # created concurrently (e.g. a zombie try): reuse if ours
            check_ours(self.client.get(plan.name, namespace=namespace), plan.labels)
            return False
        log.info("Created RayCluster %s/%s", namespace, plan.name)
        return True

    # ----------------------------------------------------------------- wait
    def check(self, plan: ClusterPlan) -> ReadinessCheck:
        """Look at the RayCluster's status, then (once its head is ready) at its dashboard."""
        namespace = self._namespace(plan)
        try:
            status = ClusterStatus.from_object(self.client.get(plan.name, namespace=namespace))
        except KubeRayNotFoundError:
            message = f"RayCluster {namespace}/{plan.name} does not exist (deleted while waiting?)"
            return ReadinessCheck("failed", message, f"RayCluster {namespace}/{plan.name}")
        verdict, message = readiness(status)
        if verdict != "ready":
            try:
                events = events_of(self.client.list_events(status.name, namespace=namespace), status.uid)
            except KubeRayApiError as exc:
                if exc.status not in (401, 403):
                    raise
                log.warning(
                    "cannot read events (the Role lacks events get/list; see docs/connections.md): %s", exc
                )
                events = []
            refused = refusal_event(events)  # KubeRay's refusal: a Warning event, no status; fails now
            if refused is not None and verdict == "waiting":
                where, verdict = f"RayCluster {namespace}/{status.name}", "failed"
                message = f"KubeRay's controller refused {where} and will not create it: {refused.line()}"
            return _look(status, verdict, message, events=events)
        url = dashboard_url(status, plan.dashboard_url_template)
        token, ref = None, plan.token_ref
        if ref is not None:
            try:
                token = self.client.read_secret_value(ref.secret_name, key=ref.key, namespace=namespace)
            except KubeRayNotFoundError:
                return _look(status, "waiting", f"token Secret {ref.secret_name} does not exist yet", url)
        answered, detail = probe_dashboard(url, token)
        if answered:
            return _look(status, "ready", f"dashboard {url} answers (Ray {detail})", url)
        hint = "check the connection's dashboard_url_template and that Airflow can reach the head"
        return _look(status, "waiting", f"head ready, but {url}/api/version: {detail} ({hint})", url)

    def handle(self, plan: ClusterPlan, dashboard_url: str, *, owned: bool = True) -> RayClusterHandle:
        """The one constructor of a KubeRay cluster's handle: which Secret holds the token, never the token
        (one the provider made goes with an owned cluster); ``owned=False``: e.g. a RayJob's cluster."""
        ref, namespace, template = plan.token_ref, self._namespace(plan), self.settings.link_url_template
        extra: dict[str, Any] = {EXTRA_TOKEN_SECRET_CREATED: bool(owned and ref and ref.provider_created)}
        if template:
            extra[EXTRA_LINK_URL] = cluster_link_url(template, plan.name, namespace)
        secret, key = (ref.secret_name, ref.key) if ref else (None, None)
        return RayClusterHandle(
            "kuberay", plan.name, dashboard_url, namespace, auth_token_secret=secret,
            auth_token_secret_key=key, conn_id=self.conn_id, extra=extra, owned=owned,
        )  # fmt: skip

    def token(self, handle: RayClusterHandle) -> str | None:
        """The token from the Secret the handle names (``None``: the cluster has no token auth)."""
        ref, namespace = _token_ref_of_handle(handle), self._namespace(handle)
        return (
            self.client.read_secret_value(ref.secret_name, key=ref.key, namespace=namespace) if ref else None
        )

    # ----------------------------------------------------------------- delete
    def _delete(self, cluster: RayClusterHandle | ClusterPlan, *, wait: bool, timeout: float) -> bool:
        """Delete the RayCluster (its pods first) and the token Secret the provider made."""
        ref = _token_ref_of_handle(cluster) if isinstance(cluster, RayClusterHandle) else cluster.token_ref
        namespace = self._namespace(cluster)
        deleted = self.client.delete(cluster.name, namespace=namespace)
        if ref is not None and ref.provider_created:
            self.client.secrets.delete(ref.secret_name, namespace=namespace)
        if wait:
            self.client.wait_until_gone(cluster.name, namespace=namespace, timeout=timeout)
        return deleted

    def _plan_of(self, obj: dict[str, Any]) -> ClusterPlan:
        """What a look at an existing RayCluster needs; its token Secret is the one the provider made
        (annotated: deleted with it), else the one the cluster names (kept)."""
        status = ClusterStatus.from_object(obj)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        created, ref = annotations.get(ANNOTATION_TOKEN_SECRET), token_ref_of(obj)
        if created:
            ref = TokenRef(created, provider_created=True)
        elif ref is not None:
            ref = dataclasses.replace(ref, provider_created=False)
        return ClusterPlan(
            name=status.name, namespace=status.namespace or self.settings.namespace,
            dashboard_url_template=self.settings.dashboard_url_template, token_ref=ref,
        )  # fmt: skip

    def listed(self, labels: Mapping[str, str] = {}, now: datetime | None = None) -> list[RunCluster]:
        """Provider RayClusters in the namespace whose labels include ``labels``, less those a RayJob created:
        KubeRay copies the RayJob's labels onto its cluster, but that cluster belongs to the RayJob (deleting
        the RayJob deletes it). A handle's URL is the in-cluster one: only deleting uses it."""
        found = self.client.list_labelled(
            {LABEL_CREATED_BY: CREATED_BY, **labels}, namespace=self.settings.namespace
        )
        owned = [obj for obj in found if not matches(obj, {LABEL_ORIGINATED_FROM_CRD: "RayJob"})]
        urls = [dashboard_url(ClusterStatus.from_object(obj)) for obj in owned]
        return [
            RunCluster(self.handle(self._plan_of(obj), url), is_expired(obj, now))
            for obj, url in zip(owned, urls, strict=True)
        ]

    # ----------------------------------------------------------------- standing clusters
    def find(self, name: str) -> ClusterPlan:
        """A standing RayCluster in the connection's namespace, with its token Secret."""
        namespace = self.settings.namespace
        obj = self.client.find(name, namespace=namespace)
        if obj is None:
            raise RayInvalidInputError(
                f"RayCluster {namespace}/{name} does not exist; check the name and the connection's "
                f"namespace (kubectl get rayclusters -n {namespace})"
            )
        return self._plan_of(obj)

    def lease_store(self) -> KubeRayLeaseStore:
        """The pools of the connection's namespace: their locks, records and leases as Leases."""
        return KubeRayLeaseStore(self.client, namespace=self.settings.namespace)

    def close(self) -> None:
        """Close the Kubernetes API client, if one was built."""
        if "client" in self.__dict__:
            self.client.api_client.close()


def check_ours(obj: dict[str, Any], labels: dict[str, str]) -> None:
    """Refuse an existing RayCluster or RayJob this task did not create, or one being deleted: a retry may
    adopt only its own."""
    meta, kind = obj.get("metadata") or {}, obj.get("kind")
    name, namespace = str(meta.get("name")), meta.get("namespace")
    where, name_field = f"{kind} {namespace}/{name}", "rayjob_name" if kind == "RayJob" else "cluster_name"
    if not matches(obj, labels):
        raise RayClusterError(
            f"{where} already exists and was not created by this task (labels {selector(labels)}); choose "
            f"another {name_field} or delete it", name=name, namespace=namespace,
        )  # fmt: skip
    if meta.get("deletionTimestamp"):
        raise RayClusterError(
            f"{where} is being deleted; retry once it is gone", name=name, namespace=namespace
        )

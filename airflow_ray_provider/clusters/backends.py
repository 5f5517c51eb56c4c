"""The two cluster backends behind the cluster operators: KubeRay (a RayCluster CR) and local (a head).

Both return the same :class:`RayClusterHandle`, so a DAG switches backend by changing only its cluster
connection. Nothing here runs Ray work in the Airflow process.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters.handle import RayClusterHandle
from airflow_ray_provider.exceptions import RayClusterError, RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.kuberay import labels as lb
from airflow_ray_provider.kuberay.errors import KubeRayConflictError, KubeRayError, KubeRaySpecError
from airflow_ray_provider.kuberay.spec import RayClusterSpec, generate_name, validate_spec

if TYPE_CHECKING:
    from airflow_ray_provider.hooks.kuberay import KubeRayHook
    from airflow_ray_provider.kuberay.builder import TokenRef
    from airflow_ray_provider.local.cluster import LocalClusterOptions

log = logging.getLogger(__name__)
ANNOTATION_TOKEN_SECRET = "airflow-ray-provider/token-secret"


@dataclass(frozen=True)
class TaskIdentity:
    """Who asks for the cluster; the cluster name derives from it (not from the try number)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    @classmethod
    def from_context(cls, context: Any) -> TaskIdentity:
        """Read the identity from an Airflow task context."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return cls(
            ti.dag_id, context.get("run_id") or ti.run_id, ti.task_id, -1 if map_index is None else map_index
        )

    def labels(self) -> dict[str, str]:
        """Ownership labels of this task's cluster."""
        return lb.ownership_labels(dag_id=self.dag_id, run_id=self.run_id, task_id=self.task_id)

    def run_labels(self) -> dict[str, str]:
        """Labels shared by every cluster of this DAG run."""
        labels = self.labels()
        return {k: labels[k] for k in (lb.LABEL_CREATED_BY, lb.LABEL_DAG_ID, lb.LABEL_RUN_HASH)}


@dataclass(frozen=True)
class ClusterRequest:
    """What the create operator was asked for (rendered templates)."""

    spec: RayClusterSpec | None = None
    manifest: dict[str, Any] | str | None = None
    cluster_name: str | None = None
    name_prefix: str = "ray"
    namespace: str | None = None
    dashboard_url_template: str | None = None
    local_options: LocalClusterOptions | None = None
    ready_timeout: float = 900.0
    poll_interval: float = 5.0
    expiry: timedelta = timedelta(hours=24)

    def name_for(self, identity: TaskIdentity) -> str:
        """The cluster name: explicit, or generated from the task identity."""
        if self.cluster_name:
            return self.cluster_name
        return generate_name(
            prefix=self.name_prefix, dag_id=identity.dag_id, run_id=identity.run_id,
            task_id=identity.task_id, map_index=identity.map_index,
        )  # fmt: skip


@dataclass(frozen=True)
class KubeRayPlan:
    """The RayCluster to create: body, where its token lives, and who owns it."""

    name: str
    namespace: str
    body: dict[str, Any]
    token_ref: TokenRef | None
    labels: dict[str, str]


class KubeRayBackend:
    """Create, wait for and delete RayClusters through a ``kuberay`` connection.

    :param hook: the connection's hook.
    """

    def __init__(self, hook: KubeRayHook) -> None:
        self.hook = hook

    def plan(self, request: ClusterRequest, identity: TaskIdentity) -> KubeRayPlan:
        """Validate the request and build the body; no API call. Bad input raises RayInvalidInputError."""
        from airflow_ray_provider.kuberay import builder

        namespace = request.namespace or self.hook.namespace
        labels = identity.labels()
        annotations = lb.ownership_annotations(
            run_id=identity.run_id, expires_at=lb.expires_at(request.expiry)
        )
        try:
            name = request.name_for(identity)
            if request.manifest is not None:
                body = builder.prepare_manifest(
                    request.manifest, name=name, labels=labels, annotations=annotations
                )
                token_ref = builder.token_ref_of(body)
            else:
                spec = request.spec or RayClusterSpec()
                spec = dataclasses.replace(spec, auth=spec.auth or self.hook.ray_auth)
                if spec.auth == "secret":
                    annotations[ANNOTATION_TOKEN_SECRET] = builder.token_secret_name(name)
                body = builder.build_body(
                    spec, name=name, namespace=namespace, labels=labels, annotations=annotations,
                    default_image=self.hook.default_image,
                )  # fmt: skip
                token_ref = builder.token_ref_of(body)
        except KubeRaySpecError as exc:
            raise RayInvalidInputError(str(exc)) from exc
        return KubeRayPlan(body["metadata"]["name"], namespace, body, token_ref, labels)

    def ensure_created(self, plan: KubeRayPlan) -> bool:
        """Create the cluster, or reuse the one an earlier try of this task created.

        :returns: ``True`` when created now.
        :raises RayClusterError: when the name belongs to a cluster this task did not create.
        """
        client = self.hook.client
        existing = client.find_cluster(plan.name, namespace=plan.namespace)
        if existing is not None:
            self._check_ours(existing, plan)
            log.info("Reusing RayCluster %s/%s created by an earlier try", plan.namespace, plan.name)
            return False
        if plan.token_ref is not None and plan.token_ref.provider_created:
            token = secrets.token_hex(32)
            client.create_secret(
                plan.token_ref.secret_name, data={plan.token_ref.key: token}, labels=plan.labels,
                namespace=plan.namespace,
            )  # fmt: skip
        try:
            client.create_cluster(plan.body, namespace=plan.namespace)
        except KubeRayConflictError:  # created concurrently (e.g. a zombie try): reuse if ours
            self._check_ours(client.get_cluster(plan.name, namespace=plan.namespace), plan)
            return False
        log.info("Created RayCluster %s/%s", plan.namespace, plan.name)
        return True

    @staticmethod
    def _check_ours(obj: dict[str, Any], plan: KubeRayPlan) -> None:
        if not lb.matches(obj, plan.labels):
            raise RayClusterError(
                f"RayCluster {plan.namespace}/{plan.name} already exists and was not created by this task "
                f"(labels {lb.selector(plan.labels)}); choose another cluster_name or delete it",
                name=plan.name, namespace=plan.namespace,
            )  # fmt: skip
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            raise RayClusterError(
                f"RayCluster {plan.namespace}/{plan.name} is being deleted; retry once it is gone",
                name=plan.name, namespace=plan.namespace,
            )  # fmt: skip

    def check_once(self, plan: KubeRayPlan, template: str | None) -> Any:
        """One readiness look (head ready and dashboard answering)."""
        from airflow_ray_provider.kuberay.readiness import check_ready

        return check_ready(
            self.hook.client, plan.name, namespace=plan.namespace,
            dashboard_url_template=template, token_ref=plan.token_ref,
        )  # fmt: skip

    def wait(self, plan: KubeRayPlan, request: ClusterRequest, template: str | None) -> str:
        """Wait until ready and return the dashboard URL; on timeout or failure delete and raise."""
        from airflow_ray_provider.kuberay.errors import KubeRayTimeoutError
        from airflow_ray_provider.kuberay.readiness import wait_ready

        try:
            check = wait_ready(
                self.hook.client, plan.name, namespace=plan.namespace, timeout=request.ready_timeout,
                poll_interval=request.poll_interval, dashboard_url_template=template,
                token_ref=plan.token_ref,
            )  # fmt: skip
        except KubeRayTimeoutError as exc:
            self.fail(plan, str(exc), exc.conditions)
        except KubeRayError as exc:
            self.fail(plan, str(exc), [])
        assert check.dashboard_url is not None
        return check.dashboard_url

    def fail(self, plan: KubeRayPlan, message: str, conditions: list[dict]) -> Any:
        """Delete what this task created, then raise :class:`RayClusterNotReadyError`."""
        try:
            self.delete(plan.name, plan.namespace, plan.token_ref, wait=True, timeout=120)
            message += " The cluster was deleted."
        except Exception as exc:  # the error to report is the readiness one; say the cleanup failed too
            message += f" Deleting it failed too ({exc}); the janitor will remove it after its expiry."
        raise RayClusterNotReadyError(
            message, name=plan.name, namespace=plan.namespace, conditions=conditions
        )

    def handle(self, plan: KubeRayPlan, dashboard_url: str) -> RayClusterHandle:
        """The XCom handle of a ready cluster."""
        ref = plan.token_ref
        return RayClusterHandle(
            backend="kuberay", name=plan.name, namespace=plan.namespace, dashboard_url=dashboard_url,
            auth_token_secret=ref.secret_name if ref else None,
            auth_token_secret_key=ref.key if ref else None,
            conn_id=self.hook.kuberay_conn_id,
            extra={"token_secret_created": bool(ref and ref.provider_created)},
        )  # fmt: skip

    def delete(
        self,
        name: str,
        namespace: str,
        token_ref: TokenRef | None,
        *,
        wait: bool = True,
        timeout: float = 300,
    ) -> bool:
        """Delete a cluster (and the token Secret the provider created); ``False`` if already gone."""
        client = self.hook.client
        deleted = client.delete_cluster(name, namespace=namespace)
        if token_ref is not None and token_ref.provider_created:
            client.delete_secret(token_ref.secret_name, namespace=namespace)
        if wait:
            client.wait_until_gone(name, namespace=namespace, timeout=timeout)
        return deleted

    def delete_labelled(
        self, labels: dict[str, str], namespace: str, *, wait: bool, timeout: float
    ) -> list[str]:
        """Delete every provider cluster whose labels include ``labels``."""
        names = []
        for obj in self.hook.client.list_clusters(labels, namespace=namespace):
            names.append(self.delete_object(obj, namespace, wait=wait, timeout=timeout))
        return names

    def delete_object(self, obj: dict[str, Any], namespace: str, *, wait: bool, timeout: float) -> str:
        """Delete a listed cluster object, with the token Secret its annotation names."""
        from airflow_ray_provider.kuberay.builder import TokenRef

        meta = obj.get("metadata") or {}
        secret = (meta.get("annotations") or {}).get(ANNOTATION_TOKEN_SECRET)
        ref = TokenRef(secret, provider_created=True) if secret else None
        self.delete(meta["name"], meta.get("namespace") or namespace, ref, wait=wait, timeout=timeout)
        return meta["name"]

    def expired(self, namespace: str, now: datetime | None = None) -> list[dict[str, Any]]:
        """Provider-created clusters whose expiry has passed."""
        owned = self.hook.client.list_clusters({lb.LABEL_CREATED_BY: lb.CREATED_BY}, namespace=namespace)
        return [obj for obj in owned if lb.is_expired(obj, now)]


def local_options_for(request: ClusterRequest) -> LocalClusterOptions:
    """Local options, with CPUs and GPUs summarised from the spec when not set explicitly.

    ``num_cpus``: head plus initial workers' CPUs of the spec, capped at this machine's cores (every
    core when there is neither a spec nor an explicit value). ``num_gpus``: 0 when the spec asks for no
    GPU, else detected by Ray.
    """
    from airflow_ray_provider.local.cluster import LocalClusterOptions

    options = request.local_options or LocalClusterOptions()
    spec = request.spec
    if spec is None:
        return options
    cpus = options.num_cpus
    if cpus is None:
        cpus = max(1, min(os.cpu_count() or 1, math.ceil(spec.total_cpus)))
    gpus = options.num_gpus if options.num_gpus is not None else (0 if spec.total_gpus == 0 else None)
    return dataclasses.replace(options, num_cpus=cpus, num_gpus=gpus)


def create_local(request: ClusterRequest, identity: TaskIdentity) -> RayClusterHandle:
    """Start (or reuse) the local head for this task and return its handle."""
    from airflow_ray_provider.local.cluster import start_cluster
    from airflow_ray_provider.local.head import LocalHeadError

    try:
        name = request.name_for(identity)
        if request.spec is not None:
            validate_spec(request.spec)
    except KubeRaySpecError as exc:
        raise RayInvalidInputError(str(exc)) from exc
    auth = request.spec is None or request.spec.auth != "disabled"
    expires = datetime.now(timezone.utc) + request.expiry
    try:
        info, _ = start_cluster(
            name, local_options_for(request), auth=auth, labels=identity.labels(), expires_at=expires
        )
    except LocalHeadError as exc:
        raise RayClusterNotReadyError(str(exc), name=name) from exc
    return RayClusterHandle(
        backend="local", name=name, dashboard_url=info.dashboard_url, auth_token_file=info.token_file,
        extra=info.to_dict(),
    )  # fmt: skip


def delete_local(handle: RayClusterHandle) -> bool:
    """Stop a local head from any process; ``False`` when it was already gone."""
    from airflow_ray_provider.local.cluster import find_cluster, stop_cluster
    from airflow_ray_provider.local.head import LocalHeadInfo

    info = LocalHeadInfo.from_dict(handle.extra) if handle.extra else find_cluster(handle.name)
    return stop_cluster(info) if info is not None else False

"""KubeRay RayJobs: cluster and job as one Kubernetes resource, so Kubernetes enforces cleanup and deadlines.

:class:`KubeRayJobs` is every step the RayJob operator and trigger take: :meth:`~KubeRayJobs.plan` (all
validation, no API call), :meth:`~KubeRayJobs.ensure` (create, or re-attach to this task instance's
RayJob), :meth:`~KubeRayJobs.look` (one typed look: the RayJob's status and, once its head is ready, a
handle to its cluster for the Job API), :meth:`~KubeRayJobs.delete` / :meth:`~KubeRayJobs.suspend` (on
kill). It composes a :class:`KubeRayBackend` (one client, one connection's settings; a standing cluster
is attached through it). The handle to a RayJob's cluster is never owned: the RayJob owns it.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Final

from airflow_ray_provider.clusters.backend import TaskIdentity
from airflow_ray_provider.clusters.handle import RayClusterHandle
from airflow_ray_provider.clusters.kuberay import KubeRayBackend, check_ours, kuberay_handle
from airflow_ray_provider.exceptions import KubeRayJobError, RayInvalidInputError
from airflow_ray_provider.kuberay import (
    ANNOTATION_RUN_ID,
    AUTH_TOKEN_KEY,
    ClusterStatus,
    KubeRayConflictError,
    KubeRaySpecError,
    RayClusterSpec,
    RayJobClient,
    RayJobOptions,
    RayJobStatus,
    build_body,
    build_rayjob_body,
    check_rayjob_name,
    dashboard_url,
    generate_name,
    prepare_manifest,
    readiness,
    token_ref_of,
    validate_options,
)

log = logging.getLogger(__name__)

#: Set by :meth:`KubeRayJobs.suspend` (a killed task): the next try resumes the RayJob instead of waiting.
ANNOTATION_SUSPENDED_ON_KILL = "airflow-ray-provider/suspended-on-kill"

#: What :meth:`KubeRayJobs.ensure` did.
CREATED: Final = "created"
ATTACHED: Final = "attached"
RESUMED: Final = "resumed"
RECREATED: Final = "recreated"


@dataclass(frozen=True)
class RayJobRequest:
    """What the RayJob operator was asked for (templates rendered).

    :param options: the job and the rules Kubernetes enforces.
    :param spec: the cluster KubeRay creates for the job (the same spec as ``CreateRayClusterOperator``).
    :param manifest: instead, a RayCluster manifest whose ``spec`` becomes ``rayClusterSpec``.
    :param cluster_name: instead, a standing RayCluster (``clusterSelector``); it must be ready.
    :param rayjob_name: a fixed RayJob name (default: generated from the task identity).
    :param name_prefix: prefix of generated names.
    :param namespace: overrides the connection's namespace.
    :param dashboard_url_template: overrides how the cluster's dashboard is reached.
    """

    options: RayJobOptions
    spec: RayClusterSpec | None = None
    manifest: dict[str, Any] | str | None = None
    cluster_name: str | None = None
    rayjob_name: str | None = None
    name_prefix: str = "rayjob"
    namespace: str | None = None
    dashboard_url_template: str | None = None


@dataclass(frozen=True)
class RayJobPlan:
    """A validated RayJob, fixed before any API call.

    :param name: the RayJob's name (the same for every try of the task instance).
    :param namespace: its namespace.
    :param labels: its ownership labels.
    :param body: the RayJob object sent to the API.
    :param standing_cluster: the standing cluster it targets (``None``: KubeRay creates one).
    :param token_secret: the token Secret the provider creates for it (``secret`` auth mode only).
    :param dashboard_url_template: how its cluster's dashboard is reached.
    """

    name: str
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    standing_cluster: str | None = None
    token_secret: str | None = None
    dashboard_url_template: str | None = None

    @property
    def where(self) -> str:
        """``RayJob <namespace>/<name>``."""
        return f"RayJob {self.namespace}/{self.name}"


@dataclass(frozen=True)
class RayJobLook:
    """One look at a RayJob.

    :param status: its typed status.
    :param cluster: a handle (never owned) to its cluster once the head is ready: its dashboard and token.
    :param cluster_gone: the RayJob names a cluster that no longer exists (KubeRay deleted it).
    """

    status: RayJobStatus
    cluster: RayClusterHandle | None = None
    cluster_gone: bool = False


def check_options(options: RayJobOptions, *, standing: bool) -> None:
    """Check a RayJob's options the way KubeRay would (e.g. when the DAG is parsed).

    :param standing: the RayJob targets a standing cluster.
    :raises RayInvalidInputError: naming the bad field and the fix.
    """
    try:
        validate_options(options, selector=standing)
    except KubeRaySpecError as exc:
        raise RayInvalidInputError(str(exc)) from exc


def inspect_command(name: str, namespace: str) -> str:
    """What to run to see more of a RayJob."""
    return f"kubectl describe rayjob {name} -n {namespace}"


class KubeRayJobs:
    """Create, re-attach to, watch, suspend and delete RayJobs through one ``kuberay`` connection.

    :param backend: the connection's KubeRay backend (its client and settings are shared).
    """

    def __init__(self, backend: KubeRayBackend) -> None:
        self.backend = backend
        self.settings = backend.settings

    @property
    def rayjobs(self) -> RayJobClient:
        """The RayJob client, on the backend's Kubernetes client."""
        return RayJobClient(self.backend.client)

    # ----------------------------------------------------------------- plan (no API call)
    def plan(self, request: RayJobRequest, identity: TaskIdentity) -> RayJobPlan:
        """Validate everything and build the body.

        :raises RayInvalidInputError: naming the bad field.
        """
        namespace = request.namespace or self.settings.namespace
        template = request.dashboard_url_template or self.settings.dashboard_url_template
        try:
            name = request.rayjob_name or generate_name(
                prefix=request.name_prefix, dag_id=identity.dag_id, run_id=identity.run_id,
                task_id=identity.task_id, map_index=identity.map_index,
            )  # fmt: skip
            check_rayjob_name(name)
            dashboard_url(ClusterStatus(name=name, namespace=namespace), template)  # a bad field fails now
            cluster_spec, labels, annotations = self._cluster_part(request, name, namespace)
            owner = identity.labels()
            body = build_rayjob_body(
                request.options, name=name, namespace=namespace, cluster_spec=cluster_spec,
                cluster_name=request.cluster_name, labels={**labels, **owner},
                annotations={**annotations, ANNOTATION_RUN_ID: identity.run_id},
            )  # fmt: skip
        except (KubeRaySpecError, ValueError) as exc:
            raise RayInvalidInputError(str(exc)) from exc
        ref = token_ref_of({"metadata": {"name": name}, "spec": cluster_spec or {}})
        return RayJobPlan(
            name=name, namespace=namespace, labels=owner, body=body, standing_cluster=request.cluster_name,
            token_secret=ref.secret_name if ref is not None and ref.provider_created else None,
            dashboard_url_template=template,
        )  # fmt: skip

    def _cluster_part(
        self, request: RayJobRequest, name: str, namespace: str
    ) -> tuple[dict[str, Any] | None, dict[str, str], dict[str, str]]:
        """The ``rayClusterSpec`` and the labels/annotations KubeRay copies onto the cluster."""
        if sum(x is not None for x in (request.spec, request.manifest, request.cluster_name)) > 1:
            raise KubeRaySpecError(
                "pass one cluster for the RayJob: spec or manifest (KubeRay creates it), or cluster (a "
                "standing RayCluster, clusterSelector), not several"
            )
        if request.cluster_name is not None:
            return None, {}, {}
        if request.manifest is not None:
            body = prepare_manifest(
                request.manifest, name=name, namespace=namespace, labels={}, annotations={}
            )
            meta = body["metadata"]
            return body["spec"], dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
        spec = request.spec or RayClusterSpec()
        spec = dataclasses.replace(spec, auth=spec.auth or self.settings.ray_auth)
        body = build_body(spec, name=name, namespace=namespace, default_image=self.settings.default_image)
        return body["spec"], dict(spec.labels), dict(spec.annotations)

    # ----------------------------------------------------------------- create or re-attach
    def check_standing_cluster(self, plan: RayJobPlan) -> RayClusterHandle | None:
        """For a RayJob on a standing cluster: that cluster exists, is ready and answers (else raise)."""
        if plan.standing_cluster is None:
            return None
        return self.backend.attach(plan.standing_cluster)

    def ensure(self, plan: RayJobPlan, *, suspend: bool = False) -> tuple[str, RayJobStatus]:
        """Create the RayJob, or re-attach to the one an earlier try of this task instance created.

        An earlier try's RayJob that is running or succeeded is re-attached to; one that failed or was
        stopped is deleted and created again under the same name (a new try runs the job again); one
        that a killed try suspended is resumed. There is never more than one RayJob per task instance.

        :param suspend: the ``suspend`` the RayJob is created with (restored when resuming).
        :returns: what was done (:data:`CREATED`, :data:`ATTACHED`, :data:`RESUMED`, :data:`RECREATED`)
            and the RayJob's status.
        :raises RayClusterError: when the name belongs to a RayJob this task did not create.
        """
        rayjobs, ns = self.rayjobs, plan.namespace
        existing = rayjobs.find(plan.name, namespace=ns)
        action = CREATED
        if existing is not None:
            self._check_ours(existing, plan)
            status = RayJobStatus.from_object(existing)
            annotations = (existing.get("metadata") or {}).get("annotations") or {}
            if not status.deleting and not (status.is_final and not status.is_success):
                if annotations.get(ANNOTATION_SUSPENDED_ON_KILL) == "true":
                    resumed = {ANNOTATION_SUSPENDED_ON_KILL: "false"}
                    patch = {"spec": {"suspend": suspend}, "metadata": {"annotations": resumed}}
                    log.info("Resuming %s, suspended when an earlier try was killed", plan.where)
                    return RESUMED, RayJobStatus.from_object(rayjobs.patch(plan.name, patch, namespace=ns))
                log.info("Re-attaching to %s of an earlier try (%s)", plan.where, status.summary())
                return ATTACHED, status
            if not status.deleting:
                log.info(
                    "%s of an earlier try ended badly (%s); running it again", plan.where, status.summary()
                )
                rayjobs.delete(plan.name, namespace=ns)
            rayjobs.wait_until_gone(plan.name, namespace=ns, timeout=120)
            action = RECREATED
        try:
            created = rayjobs.create(plan.body, namespace=ns)
        except KubeRayConflictError:  # created concurrently (a zombie try): re-attach if ours
            created = rayjobs.get(plan.name, namespace=ns)
            self._check_ours(created, plan)
            return ATTACHED, RayJobStatus.from_object(created)
        if plan.token_secret:  # ``secret`` auth mode: owned by the RayJob, so Kubernetes deletes it too
            rayjobs.create_owned_secret(
                plan.token_secret, data={AUTH_TOKEN_KEY: secrets.token_hex(32)}, owner=created,
                namespace=ns,
            )  # fmt: skip
        log.info("Created %s", plan.where)
        return action, RayJobStatus.from_object(created)

    @staticmethod
    def _check_ours(obj: dict[str, Any], plan: RayJobPlan) -> None:
        check_ours(obj, plan.where, plan.labels, "rayjob_name", name=plan.name, namespace=plan.namespace)

    # ----------------------------------------------------------------- watch
    def look(self, name: str, *, namespace: str | None = None, template: str | None = None) -> RayJobLook:
        """The RayJob's status and, once its cluster's head is ready, a handle to that cluster.

        :raises KubeRayNotFoundError: when the RayJob does not exist (deleted while waiting).
        """
        ns = namespace or self.settings.namespace
        status = RayJobStatus.from_object(self.rayjobs.get(name, namespace=ns))
        if not status.cluster_name or status.is_suspended:
            return RayJobLook(status)
        obj = self.backend.client.find_cluster(status.cluster_name, namespace=ns)
        if obj is None:
            return RayJobLook(status, cluster_gone=status.is_final)
        if readiness(ClusterStatus.from_object(obj)).verdict != "ready":
            return RayJobLook(status)
        url = dashboard_url(ClusterStatus.from_object(obj), template or self.settings.dashboard_url_template)
        ref = token_ref_of(obj)
        handle = kuberay_handle(
            status.cluster_name, ns, url, ref, conn_id=self.settings.conn_id, owned=False,
            link_url_template=self.settings.link_url_template,
        )  # fmt: skip
        return RayJobLook(status, handle)

    # ----------------------------------------------------------------- kill
    def delete(
        self, name: str, *, namespace: str | None = None, wait: bool = False, timeout: float = 120
    ) -> bool:
        """Delete the RayJob: KubeRay stops its Ray job and Kubernetes deletes its cluster."""
        ns = namespace or self.settings.namespace
        deleted = self.rayjobs.delete(name, namespace=ns)
        if wait:
            self.rayjobs.wait_until_gone(name, namespace=ns, timeout=timeout)
        return deleted

    def suspend(self, name: str, *, namespace: str | None = None) -> None:
        """Suspend the RayJob: KubeRay deletes its cluster and keeps the RayJob; the next try resumes it."""
        patch = {
            "spec": {"suspend": True},
            "metadata": {"annotations": {ANNOTATION_SUSPENDED_ON_KILL: "true"}},
        }
        self.rayjobs.patch(name, patch, namespace=namespace or self.settings.namespace)

    def close(self) -> None:
        """Close the Kubernetes API client, if one was built."""
        self.backend.close()


def rayjob_result(plan_name: str, namespace: str, status: RayJobStatus, url: str | None) -> dict[str, Any]:
    """The RayJob operator's XCom."""
    from urllib.parse import quote

    job_url = f"{url.rstrip('/')}/#/jobs/{quote(status.job_id, safe='')}" if url and status.job_id else None
    return {
        "rayjob_name": plan_name, "namespace": namespace, "job_id": status.job_id,
        "cluster_name": status.cluster_name, "status": status.job_status,
        "deployment_status": status.deployment_status, "dashboard_url": url, "job_url": job_url,
    }  # fmt: skip


def raise_for_rayjob(status: RayJobStatus, log_tail: str) -> None:
    """Return quietly for a succeeded RayJob; raise :class:`KubeRayJobError` for any other final one.

    :param log_tail: the last lines of the job's log (empty when they could not be read).
    """
    if status.is_success:
        return
    how = status.deployment_status or "not final"
    reason = f" (reason {status.reason})" if status.reason else ""
    text = f"RayJob {status.namespace}/{status.name} {how}{reason}: {status.message or 'no message'}."
    text += f" Ray job {status.job_id or '<not submitted>'} is {status.job_status or 'not started'}."
    shown = f"\nLast lines of its log:\n{log_tail}" if log_tail else "\n(its log could not be read)"
    text += f" Inspect it with: {inspect_command(status.name, status.namespace)}{shown}"
    raise KubeRayJobError(
        text, submission_id=status.job_id, status=status.job_status or how, name=status.name,
        namespace=status.namespace, deployment_status=status.deployment_status, reason=status.reason,
        log_tail=log_tail,
    )  # fmt: skip

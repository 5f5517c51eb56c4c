"""A KubeRay RayJob as a run's target: cluster and job as one Kubernetes resource, so Kubernetes enforces
cleanup and deadlines (the wait has no timeout of its own). :func:`plan_rayjob` validates everything and
builds the body (no API call); :class:`RayJobTarget` runs it. No Airflow imports.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters import ClusterPlan, KubeRayBackend, RayClusterHandle, TaskIdentity
from airflow_ray_provider.clusters.kuberay import check_ours
from airflow_ray_provider.exceptions import KubeRayJobError, RayInvalidInputError
from airflow_ray_provider.jobs.outcome import dashboard_job_url, tail
from airflow_ray_provider.jobs.submission import Choice
from airflow_ray_provider.kuberay import (
    ANNOTATION_RUN_ID,
    AUTH_TOKEN_KEY,
    DEFAULT_TTL_SECONDS,
    ClusterStatus,
    KubeRayConflictError,
    KubeRaySpecError,
    KubeRayTimeoutError,
    RayClusterSpec,
    RayJobClient,
    RayJobOptions,
    RayJobStatus,
    build_rayjob_body,
    check_name,
    dashboard_url,
    generate_name,
    readiness,
    token_ref_of,
    validate_options,
)
from airflow_ray_provider.launch.run import Observation, RunTarget

if TYPE_CHECKING:
    from airflow_ray_provider.jobs.client import JobClient
    from airflow_ray_provider.jobs.submission import JobSpec

log = logging.getLogger(__name__)

#: Set when a killed task suspends a RayJob: the next try resumes the RayJob instead of waiting.
ANNOTATION_SUSPENDED_ON_KILL = "airflow-ray-provider/suspended-on-kill"
#: Seconds a finished RayJob's run waits for KubeRay to delete the cluster it deletes at once (TTL 0).
TEARDOWN_WAIT_S = 30.0
#: The fields of a :class:`RayJobPlan` a handed-over run's target keeps.
REF_FIELDS = ("namespace", "dashboard_url_template", "suspend_on_kill", "teardown_wait", "teardown_note")


@dataclass(frozen=True)
class RayJobPlan:
    """A validated RayJob, fixed before any API call (its name is the same for every try): its ownership
    ``labels``, the ``standing_cluster`` it targets (``None``: KubeRay creates one), the ``token_secret``
    the provider creates (``secret`` auth mode), and :func:`_teardown`'s ``teardown_wait`` and note."""

    name: str
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    standing_cluster: str | None = None
    token_secret: str | None = None
    dashboard_url_template: str | None = None
    suspend_on_kill: bool = False
    teardown_wait: float = 0.0
    teardown_note: str = ""

    @property
    def where(self) -> str:
        """``RayJob <namespace>/<name>``."""
        return f"RayJob {self.namespace}/{self.name}"


@dataclass(frozen=True)
class RayJobLook:
    """One look at a RayJob: its status and, once its head is ready, a handle (never owned) to its
    cluster."""

    status: RayJobStatus
    cluster: RayClusterHandle | None = None


def check_options(options: RayJobOptions, *, standing: bool) -> None:
    """Check a RayJob's options the way KubeRay would (``standing``: it targets a standing cluster);
    :class:`RayInvalidInputError` names the bad field and the fix."""
    try:
        validate_options(options, selector=standing)
    except KubeRaySpecError as exc:
        raise RayInvalidInputError(str(exc)) from exc


def plan_rayjob(
    backend: KubeRayBackend,
    options: RayJobOptions,
    identity: TaskIdentity,
    *,
    spec: RayClusterSpec | None = None,
    manifest: dict[str, Any] | str | None = None,
    cluster_name: str | None = None,
    rayjob_name: str | None = None,
    name_prefix: str = "rayjob",
    namespace: str | None = None,
    dashboard_url_template: str | None = None,
    suspend_on_kill: bool = False,
) -> RayJobPlan:
    """Validate everything and build the RayJob's body through a KubeRay backend (no API call);
    :class:`RayInvalidInputError` names the bad field.

    :param spec: the cluster KubeRay creates for the job (the same spec as ``CreateRayClusterOperator``);
        or ``manifest``, a RayCluster manifest whose ``spec`` becomes ``rayClusterSpec``; or
        ``cluster_name``, a standing RayCluster (``clusterSelector``) that must be ready.
    :param namespace: overrides the connection's namespace (``dashboard_url_template`` its template).
    """

    namespace = namespace or backend.settings.namespace
    template = dashboard_url_template or backend.settings.dashboard_url_template
    try:
        name = rayjob_name or generate_name(
            prefix=name_prefix, dag_id=identity.dag_id, run_id=identity.run_id, task_id=identity.task_id,
            map_index=identity.map_index,
        )  # fmt: skip
        check_name(name, "RayJob name", "rayjob")
        dashboard_url(ClusterStatus(name=name, namespace=namespace), template)  # a bad field fails now
        if spec is not None and manifest is not None:
            raise KubeRaySpecError("pass the RayJob's cluster as spec or manifest, not both")
        cluster_spec, labels, annotations = None, {}, {}  # a standing cluster's
        if cluster_name is None or spec is not None or manifest is not None:  # spec + cluster_name: refused
            cluster = backend.body(spec, manifest, name=name, namespace=namespace)
            cluster_spec, meta = cluster["spec"], cluster["metadata"]  # KubeRay copies these onto the cluster
            source = meta if manifest is not None else asdict(spec or RayClusterSpec())
            labels, annotations = dict(source.get("labels") or {}), dict(source.get("annotations") or {})
        owner = identity.labels()
        body = build_rayjob_body(
            options, name=name, namespace=namespace, cluster_spec=cluster_spec, cluster_name=cluster_name,
            labels={**labels, **owner}, annotations={**annotations, ANNOTATION_RUN_ID: identity.run_id},
        )  # fmt: skip
    except (KubeRaySpecError, ValueError) as exc:
        raise RayInvalidInputError(str(exc)) from exc
    ref = token_ref_of({"metadata": {"name": name}, "spec": cluster_spec or {}})
    wait, note = _teardown(options, cluster_name)
    return RayJobPlan(
        name=name, namespace=namespace, labels=owner, body=body, standing_cluster=cluster_name,
        token_secret=ref.secret_name if ref is not None and ref.provider_created else None,
        dashboard_url_template=template, suspend_on_kill=suspend_on_kill, teardown_wait=wait,
        teardown_note=note,
    )  # fmt: skip


def _teardown(options: RayJobOptions, standing: str | None) -> tuple[float, str]:
    """How the RayJob's cluster goes: the seconds a finished run waits for it to be gone (KubeRay deletes
    it at once), and why the usage record then has no ``teardown_s``."""
    ttl = options.ttl_seconds_after_finished
    if standing is not None:
        return 0.0, "a standing cluster (clusterSelector) is never deleted by KubeRay or the provider"
    if not options.shutdown_after_job_finishes or options.deletion_rules:
        return 0.0, ("the cluster is deleted by deletion_rules or not at all "
                     "(shutdown_after_job_finishes=False)")  # fmt: skip
    ttl = DEFAULT_TTL_SECONDS if ttl is None else ttl
    if ttl:
        return 0.0, (f"KubeRay deletes the cluster ttlSecondsAfterFinished={ttl} s after the job; the task "
                     "does not wait for it (its cost then is not in reserved)")  # fmt: skip
    return TEARDOWN_WAIT_S, f"the cluster was not gone within {TEARDOWN_WAIT_S:g} s of KubeRay's verdict"


class RayJobTarget(RunTarget):
    """The run target of a KubeRay RayJob, planned by :func:`plan_rayjob` (see the module's docstring); how
    a stop and a finished run treat it (``suspend_on_kill``, ``teardown_wait``) is the plan's.

    :param ref: the face's part of :meth:`ref` (JSON, no secret).
    """

    owned = stop_takes_cluster = True

    def __init__(
        self, backend: KubeRayBackend, plan: RayJobPlan, *, ref: dict[str, Any] | None = None
    ) -> None:
        self.backend, self.plan = backend, plan
        self._ref = ref or {}
        self.client: JobClient | None = None
        self.cluster: RayClusterHandle | None = None
        self.dashboard_url: str | None = None
        self.summary = ""
        self.final = self.stopped = False
        self.job_id = ""
        self.say: Callable[[str], None] = log.info

    @property
    def rayjobs(self) -> RayJobClient:
        """The RayJob client in the plan's namespace, on the backend's Kubernetes client."""
        return RayJobClient(self.backend.client, self.plan.namespace)

    def ref(self) -> dict[str, Any]:
        """The face's reference with the RayJob's name and its plan's :data:`REF_FIELDS` (what a stop and a
        finished run need): what :meth:`from_ref` reads."""
        plan = {name: getattr(self.plan, name) for name in REF_FIELDS}
        return {**self._ref, "rayjob": self.plan.name, **plan}

    @classmethod
    def from_ref(cls, backend: KubeRayBackend, ref: dict[str, Any]) -> RayJobTarget:
        """The target a :meth:`ref` names (after a deferral: no body, it waits, stops and deletes)."""
        return cls(backend, RayJobPlan(ref["rayjob"], **{name: ref[name] for name in REF_FIELDS}), ref=ref)

    def reach(self, say: Callable[[str], None]) -> None:
        """A standing cluster must be there, ready and answering (KubeRay makes any other cluster)."""
        self.say = say
        if self.plan.standing_cluster is not None:
            self.backend.attach(self.plan.standing_cluster)

    def submit(self, job: JobSpec, base_id: str) -> tuple[Choice, str, Any]:
        """Create the RayJob, or re-attach to an earlier try's that runs or succeeded (resuming one a
        killed try suspended); one that failed or was stopped is deleted and created again. A RayJob this
        task did not create raises :class:`~airflow_ray_provider.exceptions.RayClusterError`."""
        plan, rayjobs, ns = self.plan, self.rayjobs, self.plan.namespace
        existing = rayjobs.find(plan.name)
        action = "created"
        if existing is not None:
            check_ours(existing, plan.labels)  # refuses one being deleted too
            status = RayJobStatus.from_object(existing)
            if not status.is_final or status.is_success:
                action = "of an earlier try re-attached"
                annotations = (existing.get("metadata") or {}).get("annotations") or {}
                if annotations.get(ANNOTATION_SUSPENDED_ON_KILL) == "true":
                    existing = self._suspend(plan.body["spec"].get("suspend", False), killed=False)
                    action = "resumed (suspended when an earlier try was killed)"
                return self._submitted(Choice.ATTACH, action, existing)
            self.say(f"{plan.where} of an earlier try ended badly ({status.summary()}); running it again")
            self._delete(wait=True)
            action = "recreated"
        try:
            created = rayjobs.create(plan.body)
        except KubeRayConflictError:  # created concurrently (a zombie try): re-attach if ours
            created = rayjobs.get(plan.name)
            check_ours(created, plan.labels)
            return self._submitted(Choice.ATTACH, "attached", created)
        if plan.token_secret:  # ``secret`` auth mode: owned by the RayJob, so Kubernetes deletes it too
            self.backend.client.create_secret(
                plan.token_secret, data={AUTH_TOKEN_KEY: secrets.token_hex(32)}, namespace=ns, owner=created,
                labels=dict(created["metadata"].get("labels") or {}),
            )  # fmt: skip
        return self._submitted(Choice.SUBMIT, action, created)

    def _submitted(self, choice: Choice, action: str, obj: dict[str, Any]) -> tuple[Choice, str, Any]:
        status = RayJobStatus.from_object(obj)
        self.say(f"{self.plan.where} {action}: {status.summary()}")
        self.final = status.is_final
        done = choice is Choice.ATTACH and status.is_final and status.is_success
        return Choice.DONE if done else choice, self.plan.name, RayJobLook(status)

    def _take(self, look: RayJobLook | None) -> JobClient | None:
        """Take in a look: a new client when the RayJob has a new cluster; the one it replaced."""
        if look is None:
            return None
        self.final, self.job_id = look.status.is_final, look.status.job_id
        if look.status.summary() != self.summary:
            self.summary = look.status.summary()
            self.say(f"{self.plan.where}: {self.summary}")
        if look.cluster is None or look.cluster == self.cluster:
            return None
        replaced, self.cluster = self.client, look.cluster
        self.client = self.backend.job_client(look.cluster, retry_attempts=2, retry_max_wait=1)
        self.dashboard_url = look.cluster.link_url
        return replaced

    def _find(self) -> RayJobLook | None:
        """A look at the RayJob; ``None`` when it does not exist (deleted while waiting)."""
        settings, ns = self.backend.settings, self.plan.namespace
        if (obj := self.rayjobs.find(self.plan.name)) is None:
            return None
        status = RayJobStatus.from_object(obj)
        if not status.cluster_name or status.deployment_status in ("Suspending", "Suspended"):
            return RayJobLook(status)
        found = self.backend.client.find(status.cluster_name, namespace=ns)
        if found is None or readiness(cluster := ClusterStatus.from_object(found))[0] != "ready":
            return RayJobLook(status)
        url = dashboard_url(cluster, self.plan.dashboard_url_template or settings.dashboard_url_template)
        plan = ClusterPlan(status.cluster_name, ns, token_ref=token_ref_of(found))
        return RayJobLook(status, self.backend.handle(plan, url, owned=False))

    def _observed(self, look: RayJobLook | None, text: str | None) -> Observation:
        if look is None:
            return Observation(time.time())
        kept = RayJobLook(look.status, look.cluster or self.cluster)
        return Observation(time.time(), kept, look.status.is_final, look.status.is_success, text)

    def look(self, submission_id: str, *, with_log: bool) -> Observation:
        """One look at the RayJob and, once its cluster answers, at the job's log (``None``: not submitted
        yet, or its cluster going away)."""
        look = self._find()
        self._take(look)
        job_id = look.status.job_id if look is not None and with_log else ""
        text = self.client.get_logs(job_id, or_none=True) if job_id and self.client else None
        return self._observed(look, text)

    async def alook(self, submission_id: str, *, with_log: bool) -> Observation:
        """:meth:`look` from an event loop: the Kubernetes call in a thread, the log through the reader."""
        look = await asyncio.to_thread(self._find)
        if (replaced := self._take(look)) is not None:
            await replaced.aclose()
        job_id = look.status.job_id if look is not None and with_log else ""
        text = await self.client.aget_logs(job_id, or_none=True) if job_id and self.client else None
        return self._observed(look, text)

    def stop(self, submission_id: str) -> bool:
        """Delete the RayJob (KubeRay stops its job and deletes its cluster), or suspend it (the next try
        resumes it)."""
        if self.plan.suspend_on_kill:
            self._suspend(True, killed=True)
            self.say(f"Suspended {self.plan.where}: the next try resumes it")
        else:
            self._delete(wait=False)
            self.say(f"Deleted {self.plan.where} (KubeRay stops its Ray job and deletes its cluster)")
        self.stopped = True
        return True

    def _suspend(self, suspend: bool, *, killed: bool) -> dict[str, Any]:
        """Suspend or resume the RayJob, marking whether a killed try suspended it."""
        mark = {ANNOTATION_SUSPENDED_ON_KILL: str(killed).lower()}
        patch = {"spec": {"suspend": suspend}, "metadata": {"annotations": mark}}
        return self.rayjobs.patch(self.plan.name, patch)

    def _delete(self, *, wait: bool) -> None:
        self.rayjobs.delete(self.plan.name)
        if wait:
            self.rayjobs.wait_until_gone(self.plan.name, timeout=120)

    def delete(self, say: Callable[[str], None]) -> bool:
        """Delete a RayJob that has not finished; keep one that finished as its run's record (waiting up to
        ``teardown_wait`` for KubeRay to delete its cluster). Whether a cluster went."""
        if self.stopped:  # deleted or suspended already: KubeRay takes its cluster
            return False
        if self.final:
            say(f"Kept {self.plan.where}: it finished, and KubeRay deletes its cluster after the job")
            if self.plan.teardown_wait <= 0 or self.cluster is None:
                return False
            try:
                self.backend.client.wait_until_gone(self.cluster.name, namespace=self.plan.namespace,
                                                    timeout=self.plan.teardown_wait)  # fmt: skip
            except KubeRayTimeoutError:
                return False
            return True
        self._delete(wait=True)
        say(f"Deleted {self.plan.where} (KubeRay stops its Ray job and deletes its cluster)")
        return True

    def keep(self, say: Callable[[str], None]) -> None:
        """Say that the RayJob is kept."""
        say(f"Kept {self.plan.where}")

    def usage_facts(self) -> tuple[str, str, bool, str, str | None]:
        """Mode ``rayjob``: the cluster KubeRay made for it (the run's), or a standing one."""
        plan, conn_id = self.plan, self._ref.get("cluster_conn_id")
        return "rayjob", plan.name, plan.standing_cluster is None, plan.teardown_note, conn_id

    def dashboard(self) -> JobClient | None:
        """The client of the RayJob's cluster, looked up when this process has not seen it yet."""
        if self.client is None:
            self._take(self._find())
        return self.client

    def logs(self, submission_id: str) -> str:
        """The job's log through its cluster's dashboard, ``""`` once that is gone."""
        return self.look(submission_id, with_log=True).log_text or ""

    def result(self, subject: RayJobLook, logs: Callable[[], str], tail_lines: int) -> dict[str, Any]:
        """The RayJob's XCom; :class:`KubeRayJobError` (reason, message, log tail, what to run) if it did
        not succeed."""
        status = subject.status
        if not status.is_success:
            log_tail = tail(logs(), tail_lines)
            how = status.deployment_status or "not final"
            reason = f" (reason {status.reason})" if status.reason else ""
            text = f"RayJob {status.namespace}/{status.name} {how}{reason}: {status.message or 'no message'}."
            text += f" Ray job {status.job_id or '<not submitted>'} is {status.job_status or 'not started'}."
            shown = f"\nLast lines of its log:\n{log_tail}" if log_tail else "\n(its log could not be read)"
            text += f" Inspect it with: kubectl describe rayjob {status.name} -n {status.namespace}{shown}"
            raise KubeRayJobError(
                text, submission_id=status.job_id, status=status.job_status or how, name=status.name,
                namespace=status.namespace, deployment_status=status.deployment_status, reason=status.reason,
                log_tail=log_tail,
            )  # fmt: skip
        url = subject.cluster.dashboard_url if subject.cluster is not None else None
        job_url = dashboard_job_url(url, status.job_id) if url and status.job_id else None
        return {
            "rayjob_name": self.plan.name, "namespace": self.plan.namespace, "job_id": status.job_id,
            "cluster_name": status.cluster_name, "status": status.job_status,
            "deployment_status": status.deployment_status, "dashboard_url": url, "job_url": job_url,
        }  # fmt: skip

    def link(self, submission_id: str) -> str | None:
        """The Ray job's page in its cluster's dashboard, once the cluster answered."""
        return (
            dashboard_job_url(self.dashboard_url, self.job_id) if self.dashboard_url and self.job_id else None
        )

    def restore(self, data: dict[str, Any]) -> RayJobLook:
        """A handed-over look (``dataclasses.asdict``), taken in without connecting to its cluster."""
        cluster = RayClusterHandle.from_dict(data["cluster"]) if data.get("cluster") else None
        look = RayJobLook(RayJobStatus(**data["status"]), cluster)
        self.cluster, self.final = self.cluster or cluster, look.status.is_final
        self.dashboard_url = self.dashboard_url or (cluster.link_url if cluster else None)
        self.job_id = self.job_id or look.status.job_id
        return look

"""``KubeRayJobOperator``: a KubeRay ``RayJob`` resource, so Kubernetes itself enforces cleanup and deadlines.

The RayJob carries the cluster (``rayClusterSpec`` from the same spec and validation as
``CreateRayClusterOperator``, or a manifest's spec) or targets a standing cluster (``clusterSelector``).
KubeRay creates the cluster, submits the job, and deletes the cluster when the job ends
(``shutdownAfterJobFinishes``), fails it after ``activeDeadlineSeconds``, retries it ``backoffLimit`` times:
nothing depends on the Airflow worker staying alive. The RayJob's name is deterministic per task instance,
so a retried or restarted task re-attaches to it (see :meth:`KubeRayJobs.ensure`) and never makes a second.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any, Literal, NoReturn, get_args

from airflow.sdk import BaseOperator, conf

from airflow_ray_provider.airflow_errors import AirflowErrors
from airflow_ray_provider.clusters import (
    KubeRayJobs,
    RayClusterHandle,
    RayClusterSpec,
    RayJobLook,
    RayJobOptions,
    RayJobPlan,
    RayJobRequest,
    RayJobStatus,
    check_options,
    cluster_link_url,
    raise_for_rayjob,
    rayjob_result,
)
from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.hooks.cluster_backend import rayjobs_for_connection
from airflow_ray_provider.hooks.ray_job import emit_lines
from airflow_ray_provider.hooks.runtime_env import validate_runtime_env
from airflow_ray_provider.jobs.events import RayJobWaitFailed, parse_rayjob_event
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES, tail
from airflow_ray_provider.jobs.outcome import dashboard_job_url
from airflow_ray_provider.jobs.submission import base_submission_id, build_entrypoint, build_metadata
from airflow_ray_provider.launch import (
    Cleanup,
    Ending,
    RayJobUsagePlan,
    rayjob_plan,
    resolve_cleanup,
    wait_for_rayjob,
)
from airflow_ray_provider.launch.usage import Prices, parse_prices
from airflow_ray_provider.operators.job_link import RESUMED_ATTRIBUTE, RayJobLink, push_job_url
from airflow_ray_provider.operators.kuberay_job_usage import RayJobUsageMixin
from airflow_ray_provider.operators.lineage import check_lineage_namespaces, check_uris
from airflow_ray_provider.operators.ray_cluster import task_identity
from airflow_ray_provider.operators.templated import coerce_rendered, is_template

if TYPE_CHECKING:
    from airflow.sdk import Context

#: What a killed task does to its RayJob.
OnKill = Literal["delete", "suspend", "none"]
ON_KILL_ACTIONS: tuple[OnKill, ...] = get_args(OnKill)
_TEMPLATED_FLOATS = ("entrypoint_num_cpus", "entrypoint_num_gpus")
_TEMPLATED_INTEGERS = (
    "ttl_seconds_after_finished",
    "active_deadline_seconds",
    "backoff_limit",
    "pre_running_deadline_seconds",
)
#: Numbers that may be Jinja (``"{{ params.cpus }}"``): numbers once rendered, checked with the options then.
TEMPLATED_NUMBERS = (*_TEMPLATED_FLOATS, *_TEMPLATED_INTEGERS)


def _legacy_on_kill(on_kill: str | None) -> Cleanup | None:
    """The cleanup a deprecated ``on_kill`` stands for (``suspend`` is not deprecated: it is a verb)."""
    if on_kill is None or on_kill == "suspend":
        return None
    if on_kill not in ON_KILL_ACTIONS:
        raise RayInvalidInputError(f"on_kill must be one of {ON_KILL_ACTIONS}, got {on_kill!r}")
    new = Cleanup.ALWAYS if on_kill == "delete" else Cleanup.NEVER
    warnings.warn(
        f"on_kill={on_kill!r} is deprecated: pass cleanup={new.value!r} (see docs/launch.md, 'Cleanup')",
        DeprecationWarning,
        stacklevel=4,
    )
    return new


def _standing_name(cluster: Any) -> str | None:
    """A standing cluster given as its name or as a (KubeRay) cluster handle."""
    if cluster is None or isinstance(cluster, str):
        return cluster
    handle = RayClusterHandle.from_dict(cluster)  # InvalidClusterHandleError: bad input
    if handle.backend != "kuberay":
        raise RayInvalidInputError(
            f"a RayJob runs on a KubeRay cluster; the handle of {handle.name} is local"
        )
    return handle.name


class KubeRayJobOperator(AirflowErrors, RayJobUsageMixin, BaseOperator):
    """Run a Ray job as a KubeRay ``RayJob`` and wait for it (in the worker, or deferred).

    XCom: ``{"rayjob_name", "namespace", "job_id", "cluster_name", "status", "deployment_status",
    "dashboard_url", "job_url"}``; the "Ray job" extra link opens the job in the Ray dashboard.

    :param entrypoint: shell command, or a list of arguments (quoted with ``shlex.join``).
    :param cluster_conn_id: a ``kuberay`` connection.
    :param spec: the cluster KubeRay creates for the job (:class:`RayClusterSpec` or a dict of its fields).
    :param manifest: instead, a RayCluster manifest (dict, YAML text or file) whose spec is used.
    :param cluster: instead, a standing RayCluster: its name or a cluster handle (``clusterSelector``).
    :param rayjob_name: a fixed RayJob name (default: generated from dag, run, task and map index).
    :param name_prefix: prefix of generated names.
    :param namespace: overrides the connection's namespace.
    :param dashboard_url_template: overrides how the cluster's dashboard is reached (see
        ``CreateRayClusterOperator``).
    :param runtime_env: Ray runtime environment (``runtimeEnvYAML``; ``working_dir`` must be a remote URI).
    :param metadata: Ray job metadata; the ``airflow_*`` task-instance keys are added.
    :param entrypoint_num_cpus: CPUs reserved for the entrypoint.
    :param entrypoint_num_gpus: GPUs reserved for the entrypoint. These two and the four numbers of
        seconds or retries below may be Jinja (``"{{ params.cpus }}"``): numbers once rendered, and
        checked then, before any API call.
    :param entrypoint_resources: custom resources reserved for the entrypoint.
    :param shutdown_after_job_finishes: KubeRay deletes the cluster when the job ends (default).
    :param ttl_seconds_after_finished: seconds before that deletion (default 30: time to read the log).
    :param active_deadline_seconds: KubeRay fails the RayJob (``DeadlineExceeded``) after this many seconds.
    :param backoff_limit: KubeRay retries a failed RayJob this many times, each on a new cluster.
    :param submission_mode: ``K8sJobMode`` (default: a submitter Kubernetes Job) or ``HTTPMode``.
    :param suspend: create the RayJob suspended (Kueue resumes it when it admits it).
    :param queue_name: the Kueue ``LocalQueue`` (label ``kueue.x-k8s.io/queue-name``).
    :param deletion_rules: KubeRay's ``deletionStrategy.deletionRules`` (1.6+): delete workers, cluster
        or the RayJob itself, each a TTL after the job ends; needs ``shutdown_after_job_finishes=False``.
    :param pre_running_deadline_seconds: KubeRay fails the RayJob (``PreRunningDeadlineExceeded``) when it
        is not running this long after it started (pods waiting for scarce resources).
    :param cleanup: what a kill does to the RayJob (docs/launch.md, "Cleanup"): ``always`` (default): a
        worker's SIGTERM and a user's kill delete it (KubeRay then deletes its cluster); ``on_exception``:
        only a user's kill of the deferred task does; ``never``: nothing does. KubeRay itself deletes the
        cluster after the job (``shutdown_after_job_finishes``) and enforces ``active_deadline_seconds``.
    :param on_kill: ``suspend``: a kill suspends the RayJob instead of deleting it (the next try resumes
        it). ``delete`` and ``none`` are deprecated: use ``cleanup="always"`` / ``cleanup="never"``.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param poll_interval: seconds between looks at the RayJob.
    :param stream_logs: write the job's log into the task log (through the dashboard, with the token).
    :param log_tail_lines: log lines carried by the error of a failed RayJob.
    :param prices: price per resource-hour for the usage record (docs/usage.md); default: the ``kuberay``
        connection's ``prices`` extra.
    :param artifact_uri: where the job writes its artifacts; ``usage.json`` goes there (default: the
        ``output_uri`` of a workload entrypoint).
    :param record_usage: make the usage record (XCom ``usage``, ``usage.json``, one log line).
    :param lineage_inputs: URIs the job reads, for OpenLineage (a workload entrypoint names its own).
    :param lineage_outputs: URIs the job writes, for OpenLineage.
    """

    template_fields = (
        "entrypoint", "runtime_env", "metadata", "spec", "manifest", "cluster", "rayjob_name", "namespace",
        "entrypoint_resources", "queue_name", "artifact_uri", *TEMPLATED_NUMBERS,
    )  # fmt: skip
    template_fields_renderers = {
        "runtime_env": "json",
        "metadata": "json",
        "spec": "json",
        "manifest": "yaml",
    }
    operator_extra_links = (RayJobLink(),)
    ui_color = "#d6f0ff"

    def __init__(
        self,
        *,
        entrypoint: str | list[str],
        cluster_conn_id: str | None = None,
        spec: RayClusterSpec | dict[str, Any] | None = None,
        manifest: dict[str, Any] | str | None = None,
        cluster: str | dict[str, Any] | None = None,
        rayjob_name: str | None = None,
        name_prefix: str = "rayjob",
        namespace: str | None = None,
        dashboard_url_template: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_resources: dict[str, float] | None = None,
        shutdown_after_job_finishes: bool = True,
        ttl_seconds_after_finished: int | None = None,
        active_deadline_seconds: int | None = None,
        backoff_limit: int | None = None,
        submission_mode: str = "K8sJobMode",
        suspend: bool = False,
        queue_name: str | None = None,
        deletion_rules: list[dict[str, Any]] | None = None,
        pre_running_deadline_seconds: int | None = None,
        on_kill: OnKill | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        stream_logs: bool = True,
        log_tail_lines: int = DEFAULT_TAIL_LINES,
        cleanup: str | Cleanup | None = None,
        prices: dict[str, Any] | Prices | None = None,
        artifact_uri: str | None = None,
        record_usage: bool = True,
        lineage_inputs: list[str] | None = None,
        lineage_outputs: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.prices = parse_prices(prices)  # bad prices fail when the DAG is parsed
        self.artifact_uri = artifact_uri
        self.record_usage = record_usage
        self.lineage_inputs = check_uris(lineage_inputs, "lineage_inputs")
        self.lineage_outputs = check_uris(lineage_outputs, "lineage_outputs")
        self.entrypoint = entrypoint
        self.cluster_conn_id = cluster_conn_id
        self.spec = dataclasses.asdict(spec) if isinstance(spec, RayClusterSpec) else spec
        self.manifest = manifest
        self.cluster = cluster
        self.rayjob_name = rayjob_name
        self.name_prefix = name_prefix
        self.namespace = namespace
        self.dashboard_url_template = dashboard_url_template
        self.runtime_env = runtime_env
        self.metadata = metadata
        self.entrypoint_num_cpus = entrypoint_num_cpus
        self.entrypoint_num_gpus = entrypoint_num_gpus
        self.entrypoint_resources = entrypoint_resources
        self.shutdown_after_job_finishes = shutdown_after_job_finishes
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.active_deadline_seconds = active_deadline_seconds
        self.backoff_limit = backoff_limit
        self.submission_mode = submission_mode
        self.suspend = suspend
        self.queue_name = queue_name
        self.deletion_rules = deletion_rules
        self.pre_running_deadline_seconds = pre_running_deadline_seconds
        self.on_kill_action: str = on_kill or "delete"
        self.cleanup = resolve_cleanup(
            cleanup, _legacy_on_kill(on_kill), default=Cleanup.ALWAYS, legacy_name="on_kill"
        )
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.stream_logs = stream_logs
        self.log_tail_lines = log_tail_lines
        self._check_static()
        self._rayjob: tuple[str, str] | None = None
        self._announced: RayClusterHandle | None = None
        self._watch: Any = None
        self._usage_record: dict[str, Any] | None = None
        self._final: RayJobStatus | None = None
        self._context: Context | None = None
        self._dashboard_url: str | None = None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the templated fields, then make the templated numbers numbers (naming a bad one).

        They are checked again with the other options when the request is built, before any API call.
        """
        super().render_template_fields(context, jinja_env)
        coerce_rendered(self, floats=_TEMPLATED_FLOATS, integers=_TEMPLATED_INTEGERS)

    # ----------------------------------------------------------------- checks (no I/O)
    def _check_static(self) -> None:
        """What can be checked before templates are rendered (numbers, modes, combinations)."""
        if sum(x is not None for x in (self.spec, self.manifest, self.cluster)) > 1:
            raise RayInvalidInputError(
                "pass one cluster: spec or manifest (KubeRay creates it for the job), or cluster (a standing "
                "RayCluster, by name or handle), not several"
            )
        if self.on_kill_action not in ON_KILL_ACTIONS:
            raise RayInvalidInputError(
                f"on_kill must be one of {ON_KILL_ACTIONS}, got {self.on_kill_action!r}"
            )
        if self.poll_interval <= 0:
            raise RayInvalidInputError(f"poll_interval must be positive, got {self.poll_interval!r}")
        standing = self.cluster is not None
        literal = self._options("-", runtime_env={}, metadata={})  # a Jinja number is checked once rendered
        check_options(dataclasses.replace(literal, **self._templated_as_none()), standing=standing)
        if self.on_kill_action == "suspend" and (standing or not self.shutdown_after_job_finishes):
            raise RayInvalidInputError(
                "on_kill='suspend' needs shutdown_after_job_finishes=True and a cluster spec (KubeRay "
                "suspends a RayJob by deleting its cluster); use on_kill='delete' or 'none'"
            )

    def _templated_as_none(self) -> dict[str, Any]:
        return {name: None for name in TEMPLATED_NUMBERS if is_template(getattr(self, name))}

    def _options(
        self,
        entrypoint: str,
        *,
        runtime_env: dict[str, Any],
        metadata: dict[str, str],
        job_id: str | None = None,
    ) -> RayJobOptions:
        return RayJobOptions(
            entrypoint=entrypoint, job_id=job_id, runtime_env=runtime_env, metadata=metadata,
            entrypoint_num_cpus=self.entrypoint_num_cpus, entrypoint_num_gpus=self.entrypoint_num_gpus,
            entrypoint_resources=self.entrypoint_resources,
            shutdown_after_job_finishes=self.shutdown_after_job_finishes,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
            active_deadline_seconds=self.active_deadline_seconds, backoff_limit=self.backoff_limit,
            submission_mode=self.submission_mode, suspend=self.suspend, queue_name=self.queue_name,
            deletion_rules=self.deletion_rules,
            pre_running_deadline_seconds=self.pre_running_deadline_seconds,
        )  # fmt: skip

    def build_request(self, context: Context) -> RayJobRequest:
        """Validate the rendered arguments into a request; raises before any I/O."""
        ti = context["ti"]
        map_index = ti.map_index if ti.map_index is not None else -1
        keys = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": map_index,
                "try_number": ti.try_number}  # fmt: skip
        options = self._options(
            build_entrypoint(self.entrypoint), runtime_env=validate_runtime_env(self.runtime_env),
            metadata=build_metadata(self.metadata, task_instance=keys),
            job_id=base_submission_id(ti.dag_id, ti.run_id, ti.task_id, map_index),
        )  # fmt: skip
        try:
            spec = RayClusterSpec.from_dict(self.spec) if self.spec is not None else None
        except ValueError as exc:
            raise RayInvalidInputError(str(exc)) from exc
        return RayJobRequest(
            options=options, spec=spec, manifest=self.manifest, cluster_name=_standing_name(self.cluster),
            rayjob_name=self.rayjob_name, name_prefix=self.name_prefix, namespace=self.namespace,
            dashboard_url_template=self.dashboard_url_template,
        )  # fmt: skip

    # ----------------------------------------------------------------- execution
    def execute(self, context: Context) -> dict[str, Any]:
        """Create (or re-attach to) the task instance's RayJob, then wait until KubeRay is done with it."""
        request = self.build_request(context)
        check_lineage_namespaces(self.job_io())  # a bad OpenLineage dataset fails before any API call
        self._context = context
        jobs = rayjobs_for_connection(self.cluster_conn_id, namespace=self.namespace)
        try:
            plan = jobs.plan(request, task_identity(context))  # every check; still no API call
            self._rayjob = (plan.name, plan.namespace)
            usage = self._usage_plan(plan, request)
            standing = jobs.check_standing_cluster(plan)  # a standing cluster must be there, ready, answering
            self._check_prices_on_standing(standing, usage)
            action, status = jobs.ensure(plan, suspend=self.suspend)
            self.log.info("RayJob %s/%s %s: %s", plan.namespace, plan.name, action, status.summary())
            if self.deferrable and not status.is_final:
                self._defer(plan, usage)
            look, text = self._wait(jobs, plan, context, usage)
        finally:
            jobs.close()
        self._publish_usage(self._usage_record)
        url = look.cluster.dashboard_url if look.cluster else None
        return self._finish(look.status, url, tail(text, self.log_tail_lines))

    def _wait(
        self, jobs: KubeRayJobs, plan: RayJobPlan, context: Context, usage: RayJobUsagePlan | None
    ) -> tuple[RayJobLook, str]:
        """Look until the RayJob is final (the wait's one step function), streaming its log; the usage
        record is made at the first look that finds the Ray job ended."""
        from airflow_ray_provider.launch import RayJobWatch
        from airflow_ray_provider.triggers.kuberay_job import cluster_hook

        watch = self._watch = RayJobWatch(self.log, cluster_hook, usage)

        def look() -> RayJobLook | None:
            seen = watch.look(jobs, plan.name, namespace=plan.namespace, template=plan.dashboard_url_template)
            if seen is not None and seen.cluster is not None and self._announced != seen.cluster:
                self._announce(seen, context)
            return seen

        with watch.sampling(self.poll_interval):  # busy CPU between looks too, when they are far apart
            outcome = wait_for_rayjob(
                rayjob_plan(stream_logs=self.stream_logs),
                look=look,
                read_logs=watch.read,
                emit=lambda lines: emit_lines(self.log, lines),
                poll_interval=self.poll_interval,
            )
        final = outcome.seen.subject
        if final is None:
            raise RayProviderError(
                f"RayJob {plan.namespace}/{plan.name} was deleted while this task waited for it "
                "(by a user or a kill)"
            )
        watch.until_cluster_gone(final, look, self.poll_interval)
        self._usage_record = watch.record
        return RayJobLook(final.status, watch.cluster(final)), watch.text

    def _announce(self, look: RayJobLook, context: Context) -> None:
        """The cluster answers: push the job's dashboard link."""
        assert look.cluster is not None
        self._announced = look.cluster
        job_url = dashboard_job_url(look.cluster.link_url, look.status.job_id)  # the browser's address
        push_job_url(self, context["ti"], job_url)
        self.log.info("Ray dashboard of RayJob %s: %s", look.status.name, job_url)

    def _defer(self, plan: RayJobPlan, usage: RayJobUsagePlan | None) -> NoReturn:
        from airflow_ray_provider.triggers.kuberay_job import KubeRayJobTrigger

        trigger = KubeRayJobTrigger(
            conn_id=self.cluster_conn_id, namespace=plan.namespace, name=plan.name,
            dashboard_url_template=plan.dashboard_url_template, poll_interval=self.poll_interval,
            stream_logs=self.stream_logs, on_kill=self.on_kill_action, log_tail_lines=self.log_tail_lines,
            cleanup_policy=self.cleanup.value, usage=usage.to_dict() if usage else None,
        )  # fmt: skip
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger: succeed, or raise with the RayJob's reason, message and log tail.

        Without an event (the worker was killed and the task rerun) it looks at the RayJob again.
        """
        setattr(self, RESUMED_ATTRIBUTE, True)
        if event is None:
            self.log.info("Resumed without a trigger event: looking at this task instance's RayJob again")
            return self.execute(context)
        self._context = context
        typed = parse_rayjob_event(event)
        if isinstance(typed, RayJobWaitFailed):
            raise RayProviderError(f"waiting for RayJob {typed.name!r} failed: {typed.message}")
        status = RayJobStatus.from_dict(typed.rayjob)
        self._publish_usage(typed.usage)
        if typed.dashboard_url and status.job_id:
            push_job_url(self, context["ti"], dashboard_job_url(self._link_base(status, typed.dashboard_url),
                                                                status.job_id))  # fmt: skip
        return self._finish(status, typed.dashboard_url, typed.log_tail)

    def _link_base(self, status: RayJobStatus, dashboard_url: str) -> str:
        """The dashboard of the RayJob's cluster as a browser reaches it (the connection's
        ``link_url_template``), else the address Airflow used."""
        jobs = rayjobs_for_connection(self.cluster_conn_id, namespace=self.namespace)
        try:
            template = jobs.settings.link_url_template
        finally:
            jobs.close()
        if not template or not status.cluster_name:
            return dashboard_url
        return cluster_link_url(template, status.cluster_name, status.namespace)

    def _finish(self, status: RayJobStatus, url: str | None, log_tail: str) -> dict[str, Any]:
        self._final, self._dashboard_url = status, url
        raise_for_rayjob(status, log_tail)
        self.log.info("RayJob %s/%s: %s", status.namespace, status.name, status.summary())
        return rayjob_result(status.name, status.namespace, status, url)

    def on_kill(self) -> None:
        """A SIGTERM: delete or suspend the RayJob as the cleanup table says for a worker's SIGTERM."""
        from airflow_ray_provider.triggers.kuberay_job import kill_verb

        verb = kill_verb(self.cleanup, self.on_kill_action, Ending.WORKER_SIGTERM)
        self._record_on_kill()
        if self._rayjob is None or verb == "none":
            return
        name, namespace = self._rayjob
        jobs = rayjobs_for_connection(self.cluster_conn_id, namespace=namespace)
        try:
            if verb == "suspend":
                jobs.suspend(name, namespace=namespace)
            else:
                jobs.delete(name, namespace=namespace)
        finally:
            jobs.close()
        self.log.info("RayJob %s/%s: %s on kill", namespace, name, verb)

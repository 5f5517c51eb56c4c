"""``SubmitRayJobOperator``: submit a Ray job through the Job API and wait for it well.

Re-attach, never duplicate: the submission id is deterministic per task instance, so a retried or
restarted task waits on its live job, succeeds with its succeeded job, or submits a new attempt only
after a failed/stopped one (the rule is in :mod:`airflow_ray_provider.jobs.reattach`).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import BaseOperator, conf

from airflow_ray_provider.airflow_errors import AirflowErrors
from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.hooks.ray_job import emit_lines
from airflow_ray_provider.hooks.runtime_env import validate_runtime_env
from airflow_ray_provider.jobs.events import JobDone, JobEvent, JobTimedOut, parse_job_event
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES, new_log_lines, resume_offset
from airflow_ray_provider.jobs.outcome import job_result
from airflow_ray_provider.jobs.reattach import Action, submit_or_attach
from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    base_submission_id,
    build_entrypoint,
    build_metadata,
    check_entrypoint_reservation,
    check_runtime_env,
)
from airflow_ray_provider.launch import (
    Cleanup,
    Ending,
    WaitPlan,
    actions_for,
    event_for,
    finish,
    from_stop_on_kill,
    resolve_cleanup,
    wait_for_job,
)
from airflow_ray_provider.launch.usage import Prices, parse_prices
from airflow_ray_provider.operators.job_link import (
    RESUMED_ATTRIBUTE,
    RayJobLink,
    job_link,
    push_job_url,
)
from airflow_ray_provider.operators.job_target import (
    RayJobTargetMixin,
    check_target_arguments,
)
from airflow_ray_provider.operators.job_usage import (
    TEARDOWN_NOTES,
    JobUsage,
    add_teardown,
    connection_prices,
    entrypoint_request,
)
from airflow_ray_provider.operators.lineage import (
    JobIO,
    RayRun,
    check_lineage_namespaces,
    check_uris,
    job_io_of,
    operator_lineage,
)
from airflow_ray_provider.operators.templated import coerce_rendered, is_literal, is_template, rendered_number

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch.usage import BusyLedger, BusySampler


@dataclass(frozen=True)
class OwnedCluster:
    """The cluster a task created itself, as its trigger needs it to delete it on a user's kill.

    :param conn_id: the connection it was created through (``None``: a local head).
    """

    conn_id: str | None


def _seconds(value: float | timedelta | None, name: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise RayInvalidInputError(f"{name} must be positive, got {value!r}")
    return seconds


class SubmitRayJobOperator(AirflowErrors, RayJobTargetMixin, BaseOperator):
    """Submit a Ray job and (optionally) wait for it, streaming its log into the task log.

    XCom (return value): ``{"submission_id", "status", "dashboard_url", "job_url"}``.

    :param entrypoint: shell command, or a list of arguments (quoted safely with ``shlex.join``).
    :param cluster: a cluster handle, e.g. ``create_cluster.output`` (or use ``ray_conn_id``).
    :param ray_conn_id: a ``ray`` connection (default ``ray_default`` when no cluster is given).
    :param runtime_env: Ray runtime environment (``working_dir`` uploaded from a local folder, ``pip``,
        ``env_vars``, ...).
    :param metadata: job metadata; ``airflow_dag_id``, ``airflow_run_id``, ``airflow_task_id``,
        ``airflow_map_index`` and ``airflow_try_number`` are always added.
    :param entrypoint_num_cpus: CPUs reserved for the entrypoint.
    :param entrypoint_num_gpus: GPUs reserved for the entrypoint.
    :param entrypoint_memory: bytes reserved for the entrypoint.
    :param entrypoint_resources: custom resources reserved for the entrypoint.
    :param wait_for_completion: wait for the job; ``False`` returns once it is submitted.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param poll_interval: seconds between status polls.
    :param job_timeout: seconds (or timedelta) from the job's start; on expiry it is stopped and the
        task fails.
    :param stream_logs: write the job's log into the task log while it runs.
    :param log_tail_lines: log lines carried by the error of a failed job.
    :param cleanup: what a timeout or a kill does to the job (docs/launch.md, "Cleanup"):
        ``on_exception`` (default): ``job_timeout`` and a user's kill (mark failed/success, clear) stop it,
        a SIGTERM of the worker (pod eviction, worker shutdown, deploy) leaves it running so the retry
        re-attaches; ``always``: a SIGTERM stops it too (a retry then submits ``-a2``); ``never``: nothing
        stops it.
    :param stop_on_kill: deprecated: ``None`` is ``cleanup="on_exception"``, ``True`` is ``"always"``,
        ``False`` is ``"never"``.
    :param retry_attempts: attempts per Job API call on transient failures.
    :param prices: price per resource-hour (``{"CPU": 0.05, "GPU": 2.1, "memory_gib": 0.005, "groups":
        {...}}``, docs/usage.md); default: the connection's ``prices`` extra; none: no cost in the record.
    :param artifact_uri: where the job writes its artifacts; ``usage.json`` goes there (default: the
        ``output_uri`` of a workload entrypoint).
    :param record_usage: make the usage record (XCom ``usage``, ``usage.json``, one log line).
    :param lineage_inputs: URIs the job reads, for OpenLineage (a workload entrypoint names its own).
    :param lineage_outputs: URIs the job writes, for OpenLineage.
    """

    template_fields = (
        "entrypoint",
        "runtime_env",
        "metadata",
        "cluster",
        "ray_conn_id",
        "entrypoint_resources",
        "entrypoint_num_cpus",
        "entrypoint_num_gpus",
        "entrypoint_memory",
        "job_timeout",
        "artifact_uri",
    )
    template_fields_renderers = {"runtime_env": "json", "metadata": "json", "cluster": "json"}
    operator_extra_links = (RayJobLink(),)
    ui_color = "#d6e9ff"
    #: ``cleanup`` when neither it nor ``stop_on_kill`` is given.
    default_cleanup: ClassVar[Cleanup] = Cleanup.ON_EXCEPTION
    #: The usage record's ``mode``; ``None``: ``ephemeral`` on a cluster the run created, else ``standing``.
    usage_mode: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        entrypoint: str | list[str],
        cluster: Any = None,
        ray_conn_id: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: int | None = None,
        entrypoint_resources: dict[str, float] | None = None,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        job_timeout: float | timedelta | None = None,
        stream_logs: bool = True,
        log_tail_lines: int = DEFAULT_TAIL_LINES,
        stop_on_kill: bool | None = None,
        retry_attempts: int = 5,
        cleanup: str | Cleanup | None = None,
        prices: dict[str, Any] | Prices | None = None,
        artifact_uri: str | None = None,
        record_usage: bool = True,
        lineage_inputs: list[str] | None = None,
        lineage_outputs: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_target_arguments(cluster, ray_conn_id)
        self.prices = parse_prices(prices)  # bad prices fail when the DAG is parsed
        self.artifact_uri = artifact_uri
        self.record_usage = record_usage
        self.lineage_inputs = check_uris(lineage_inputs, "lineage_inputs")
        self.lineage_outputs = check_uris(lineage_outputs, "lineage_outputs")
        self.entrypoint = entrypoint
        self.cluster = cluster
        self.ray_conn_id = ray_conn_id
        self.runtime_env = runtime_env
        self.metadata = metadata
        self.entrypoint_num_cpus = entrypoint_num_cpus
        self.entrypoint_num_gpus = entrypoint_num_gpus
        self.entrypoint_memory = entrypoint_memory
        self.entrypoint_resources = entrypoint_resources
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = _seconds(poll_interval, "poll_interval") or 5.0
        # a Jinja string stays one until rendered, then render_template_fields makes it seconds
        self.job_timeout: float | None = (
            cast("float", job_timeout) if is_template(job_timeout) else _seconds(job_timeout, "job_timeout")
        )
        self.stream_logs = stream_logs
        self.log_tail_lines = log_tail_lines
        self.stop_on_kill = stop_on_kill
        legacy = from_stop_on_kill(stop_on_kill) if stop_on_kill is not None else None
        self.cleanup = resolve_cleanup(
            cleanup, legacy, default=self.default_cleanup, legacy_name="stop_on_kill"
        )
        #: Set while the task runs on a cluster it created itself (the one-task operator).
        self.owned_cluster_conn: OwnedCluster | None = None
        self.retry_attempts = retry_attempts
        self._submission_id: str | None = None
        self._killed: Ending | None = None
        #: ``killed`` once :meth:`on_kill` ran (the record says so).
        self._ending: str | None = None
        self._context: Context | None = None
        self._usage: JobUsage | None = None
        self._usage_record: dict[str, Any] | None = None
        #: The CPU sampler while this worker waits for the job, or the ledger the trigger's event carried.
        self._busy: BusySampler | BusyLedger | None = None
        #: Set by the one-task operator: when it began waiting for its cluster, and when that answered.
        self.cluster_times: tuple[float, float] | None = None
        self._check_literals()  # bad literal job arguments fail when the DAG is parsed

    def _check_literals(self) -> None:
        """Check the job arguments that are literal values; Jinja strings and upstream values (XComs)
        are checked once rendered, before anything is submitted (:meth:`job_spec`). A local
        ``working_dir`` is checked then too: it must exist where the task runs, not where the DAG is parsed.
        """

        def literal(value: Any) -> Any:
            """``value`` when written in the DAG file as it is; ``None`` when Jinja or an upstream value
            (an XCom) is in it."""
            return value if is_literal(value) else None

        if literal(self.entrypoint) is not None:
            build_entrypoint(self.entrypoint)
        if literal(self.runtime_env) is not None:
            check_runtime_env(self.runtime_env, local_paths=False)
        build_metadata(literal(self.metadata))
        check_entrypoint_reservation(
            literal(self.entrypoint_num_cpus),
            literal(self.entrypoint_num_gpus),
            literal(self.entrypoint_memory),
            literal(self.entrypoint_resources),
        )

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the templated fields, then make the templated numbers numbers (naming a bad one)."""
        super().render_template_fields(context, jinja_env)
        coerce_rendered(
            self, floats=("entrypoint_num_cpus", "entrypoint_num_gpus"), integers=("entrypoint_memory",)
        )
        self.job_timeout = _seconds(rendered_number(self.job_timeout, "job_timeout"), "job_timeout")

    # ----------------------------------------------------------------- set-up (no I/O)
    def build_spec(self, context: Context) -> JobSpec:
        """Validate the rendered arguments and the target into a :class:`JobSpec`; raises before any I/O."""
        self._target  # noqa: B018 (validates cluster / ray_conn_id now)
        return self.job_spec(context)

    def job_spec(self, context: Context) -> JobSpec:
        """Validate the rendered job arguments (not the target) into a :class:`JobSpec`; no I/O."""
        ti = context["ti"]
        airflow_keys = {
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "map_index": ti.map_index,
            "try_number": ti.try_number,
        }
        return JobSpec(
            entrypoint=build_entrypoint(self.entrypoint),
            runtime_env=validate_runtime_env(self.runtime_env),
            metadata=build_metadata(self.metadata, task_instance=airflow_keys),
            entrypoint_num_cpus=self.entrypoint_num_cpus,
            entrypoint_num_gpus=self.entrypoint_num_gpus,
            entrypoint_memory=self.entrypoint_memory,
            entrypoint_resources=self.entrypoint_resources,
        )

    # ----------------------------------------------------------------- execution
    def execute(self, context: Context) -> dict[str, str]:
        """Submit (or re-attach to) the task instance's job, then wait as configured."""
        spec = self.build_spec(context)
        check_lineage_namespaces(self.job_io())  # a bad OpenLineage dataset fails before the job exists
        self._context = context
        ti = context["ti"]
        hook = self.hook
        usage = self.usage()
        if usage is not None:
            usage.check_before_submit(hook, self.log)  # bad prices fail here, before the job exists
        map_index = ti.map_index if ti.map_index is not None else -1
        base = base_submission_id(ti.dag_id, ti.run_id, ti.task_id, map_index)
        plan = submit_or_attach(base, hook.list_jobs, lambda sid: hook.submit_job(spec, sid))
        sid = self._submission_id = plan.submission_id
        self.job_submitted(sid)
        self._log_plan(plan.action, sid, [job.submission_id for job in plan.previous])
        job_url = job_link(hook.config.browser_url, sid, self._target[1])
        push_job_url(self, ti, job_url)
        self.log.info("Ray dashboard: %s", job_url)
        state = plan.state if plan.action is Action.DONE and plan.state else self._get(sid)
        if not self.wait_for_completion:
            return job_result(state, hook.config.dashboard_url)
        start = state.start_time / 1000.0 if state.start_time else time.time()
        offset = self._resume_offset(sid) if plan.action is Action.ATTACH and self.stream_logs else 0
        if self.deferrable and not state.is_terminal:
            self._defer(sid, start, offset)
        return self._wait(sid, start, offset)

    def job_submitted(self, submission_id: str) -> None:
        """Called once the job is submitted (or re-attached to): Ray has uploaded the spec's local files.

        Subclasses remove what they staged for the upload here, not at the end of the task, so that a
        worker killed while it waits leaves nothing behind.
        """

    def _resume_offset(self, sid: str) -> int:
        """A re-attached try streams from the last lines on (the earlier try's task log has the rest)."""
        offset = resume_offset(self._logs_best_effort(sid))
        if offset:
            self.log.info("Re-attached: the job log's first %d chars are in the earlier try's log", offset)
        return offset

    def _log_plan(self, action: Action, sid: str, previous: list[str]) -> None:
        verbs = {
            Action.SUBMIT: "Submitted Ray job %s",
            Action.ATTACH: "Re-attached to running Ray job %s (not submitting a duplicate)",
            Action.DONE: "Ray job %s already SUCCEEDED in an earlier try; not resubmitting",
        }
        self.log.info(verbs[action], sid)
        if previous:
            self.log.info("Earlier attempts of this task instance: %s", ", ".join(previous))

    def _get(self, sid: str) -> JobState:
        state = self.hook.get_job(sid)
        if state is None:
            raise RayProviderError(f"Ray job {sid!r} disappeared from {self.hook.config.dashboard_url}")
        return state

    def wait_plan(self, start: float, offset: int = 0) -> WaitPlan:
        """How this task waits for its job, in the worker or in the triggerer."""
        return WaitPlan(
            start_time=start,
            timeout=self.job_timeout,
            log_offset=offset,
            stream_logs=self.stream_logs,
            cleanup=self.cleanup,
        )

    def _wait(self, sid: str, start: float, offset: int = 0) -> dict[str, str]:
        """Wait in this worker (the one step function of :mod:`airflow_ray_provider.launch`), then finish;
        the job's process CPU times are sampled meanwhile (the usage record's ``busy``)."""
        usage = self.usage()
        with usage.sampling(self.hook, since=start) if usage is not None else nullcontext() as sampler:
            self._busy = sampler
            outcome = wait_for_job(
                self.hook,
                sid,
                self.wait_plan(start, offset),
                emit=lambda lines: emit_lines(self.log, lines),
                poll_interval=self.poll_interval,
                killed=lambda: self._killed,
            )
            return self._end(event_for(sid, outcome))

    def _defer(self, sid: str, start: float, offset: int = 0) -> None:
        from airflow_ray_provider.triggers.ray_job import RayJobTrigger

        conn_id, cluster = self._target
        usage = self.usage()  # what a kill's record needs, made in the triggerer
        trigger = RayJobTrigger(
            submission_id=sid,
            ray_conn_id=conn_id,
            cluster=cluster,
            poll_interval=self.poll_interval,
            timeout=self.job_timeout,
            start_time=start,
            log_offset=offset,
            stream_logs=self.stream_logs,
            retry_attempts=self.retry_attempts,
            cleanup_policy=self.cleanup.value,
            owns_cluster=self.owned_cluster_conn is not None,
            cluster_conn_id=self.owned_cluster_conn.conn_id if self.owned_cluster_conn else None,
            usage=usage.request(sid, self._entrypoint_request()).to_dict() if usage else None,
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    # ----------------------------------------------------------------- usage and lineage
    def usage(self) -> JobUsage | None:
        """This task's usage bookkeeping (``None`` with ``record_usage=False``); prices resolved once."""
        if not self.record_usage:
            return None
        if self._usage is None:
            conn_id, cluster = self._target
            handle = cluster or {}
            own = bool(handle.get("owned")) or self.owned_cluster_conn is not None
            prices = self.prices or connection_prices(conn_id or handle.get("conn_id"))
            started, ready = self.cluster_times or (None, None)
            mode = self.usage_mode or ("ephemeral" if own else "standing")
            # the one-task operator measures its teardown; elsewhere the record says who deletes the cluster
            note = TEARDOWN_NOTES[
                "one_task" if self.owned_cluster_conn else "ephemeral" if own else "standing"
            ]
            self._usage = JobUsage(
                prices=prices, mode=mode, own_cluster=own, cluster=str(handle.get("name") or conn_id),
                task_started=started, cluster_ready=ready, teardown_note=note,
            )  # fmt: skip
        return self._usage

    def job_io(self) -> JobIO:
        """What the job reads and writes: its workload's URIs plus ``lineage_inputs``/``lineage_outputs``."""
        return job_io_of(
            self.entrypoint,
            inputs=self.lineage_inputs,
            outputs=self.lineage_outputs,
            artifact_uri=self.artifact_uri,
        )

    def _entrypoint_request(self) -> dict[str, float]:
        return entrypoint_request(
            self.entrypoint_num_cpus, self.entrypoint_num_gpus, self.entrypoint_memory,
            self.entrypoint_resources,
        )  # fmt: skip

    def _record_usage(self, submission_id: str, ended_by: str = "finished") -> None:
        """Make the record (best effort); ``ended_by``: ``finished``, ``timed_out`` or ``killed``."""
        usage = self.usage()
        if usage is None:
            return
        if self._ending is not None:  # a kill stopped the job: the wait then saw it STOPPED
            ended_by = self._ending
        ti = self._context["ti"] if self._context is not None else None
        self._usage_record = usage.record(
            self.hook,
            submission_id,
            self._entrypoint_request(),
            ti=ti,
            artifact_uri=self.job_io().artifact_uri,
            log=self.log,
            ended_by=ended_by,
            busy=self._busy,
        )

    def record_teardown(self) -> None:
        """The task's own cluster is gone: put ``phases.teardown_s`` into the record (the one-task mode)."""
        if self._usage_record is None:
            return
        ti = self._context["ti"] if self._context is not None else None
        self._usage_record = add_teardown(
            self._usage_record, ti=ti, artifact_uri=self.job_io().artifact_uri, log=self.log
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the job's inputs and outputs, and the ``rayJob`` run facet (ids, cluster, mode,
        usage record)."""
        conn_id, cluster = self._target
        usage = self.usage()
        record = self._usage_record or {}
        run = RayRun(
            mode=usage.mode if usage else (self.usage_mode or "standing"),
            submission_id=self._submission_id,
            ray_job_id=record.get("ray_job_id"),
            cluster=str((cluster or {}).get("name") or conn_id),
            dashboard_url=(cluster or {}).get("dashboard_url"),
            usage=self._usage_record,
        )
        return operator_lineage(self.job_io(), run)

    def _logs_best_effort(self, sid: str) -> str:
        """The job's log for a final flush or an error message; best effort, never hiding the outcome."""
        try:
            return self.hook.get_job_logs(sid)
        except Exception as exc:
            self.log.warning("Could not read the log of Ray job %s: %s", sid, exc)
            return ""

    def _end(self, event: JobEvent, *, where: str = "") -> Any:
        """End the task as the wait ended: a finished job goes to :meth:`finish_job`, any other ending
        (time-out, stop, a wait that failed) raises the matching error."""
        if isinstance(event, JobDone):
            return self.finish_job(event.state)
        if isinstance(event, JobTimedOut):  # stopped by the timeout (or left running): a record all the same
            self._record_usage(event.submission_id, "timed_out")
        elif self._killed is not None:  # the wait ended on the kill, the job left running
            self._record_usage(event.submission_id, "killed")
        return finish(event, logs=self._logs_best_effort, timeout=self.job_timeout, where=where)  # raises

    def finish_job(self, state: JobState) -> Any:
        """The task's result for a finished job: raises for a failed or stopped one, else the XCom.

        Called once per task with the final state, in the sync and the deferred path, while the job's
        cluster still exists (the one-task operator deletes it afterwards); ``@task.ray`` overrides it
        to read the function's value from the job. The usage record is made first (also for a failed
        job), best effort.
        """
        self._record_usage(state.submission_id)
        finish(
            JobDone(state.submission_id, state),
            logs=self._logs_best_effort,
            timeout=self.job_timeout,
            tail_lines=self.log_tail_lines,
        )
        self.log.info("Ray job %s SUCCEEDED", state.submission_id)
        return job_result(state, self.hook.config.dashboard_url)

    def _finish(self, state: JobState) -> dict[str, str]:
        """End the task with a finished job's state."""
        return self._end(JobDone(state.submission_id, state))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, str]:
        """Resume after the trigger fired: flush the log tail, then succeed or raise.

        A resume without an event (the worker was killed between the trigger firing and this call, and
        the task was rerun) looks at the job again by the re-attach rule instead of failing.
        """
        setattr(self, RESUMED_ATTRIBUTE, True)
        if event is None:
            self.log.info("Resumed without a trigger event: looking at this task instance's Ray job again")
            return self.execute(context)
        self._context = context
        typed = parse_job_event(event)
        self._submission_id = typed.submission_id
        busy = getattr(typed, "busy", None)
        if busy:  # the trigger's samples of the job's process CPU
            from airflow_ray_provider.launch.usage import BusyLedger

            self._busy = BusyLedger.from_dict(busy)
        if isinstance(typed, JobDone) and self.stream_logs:  # lines the trigger had not written yet
            text = self._logs_best_effort(typed.submission_id)
            emit_lines(self.log, new_log_lines(text, typed.log_offset, final=True)[0])
        return self._end(typed, where=" in the triggerer")

    def on_kill(self) -> None:
        """SIGTERM of the running task: stop the job only when ``cleanup="always"`` (see the class doc)."""
        stop = actions_for(self.cleanup, Ending.WORKER_SIGTERM).stop_job
        # A stopped job ends the wait by itself (STOPPED); one left running must not be waited for.
        self._killed = None if stop else Ending.WORKER_SIGTERM
        self._ending = "killed"
        if self._submission_id and not stop:
            self.log.info(
                "Leaving Ray job %s running on kill: a retry re-attaches to it (cleanup='always' stops it)",
                self._submission_id,
            )
        if self._submission_id and stop:
            stopped = self.hook.stop_job(self._submission_id)
            self.log.info("Stopped Ray job %s on kill (was running: %s)", self._submission_id, stopped)
        if self._submission_id:  # what could be read now (the wait may not get to it: the worker stops)
            self._record_usage(self._submission_id, "killed")

"""``SubmitRayJobOperator``: submit a Ray job through the Job API and wait for it well.

Re-attach, never duplicate: the submission id is deterministic per task instance, so a retried or
restarted task waits on its live job, succeeds with its succeeded job, or submits a new attempt only
after a failed/stopped one (the rule is in :mod:`airflow_ray_provider.jobs.reattach`).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseOperator, BaseOperatorLink, conf

from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.hooks.ray_job import emit_lines
from airflow_ray_provider.hooks.runtime_env import validate_runtime_env
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES, new_log_lines, resume_offset
from airflow_ray_provider.jobs.outcome import (
    EVENT_ERROR,
    EVENT_TIMEOUT,
    dashboard_job_url,
    job_result,
    raise_for_state,
    timeout_error,
    validate_event,
)
from airflow_ray_provider.jobs.reattach import Action, submit_or_attach
from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    base_submission_id,
    build_entrypoint,
    build_metadata,
)
from airflow_ray_provider.operators.job_target import (
    RayJobTargetMixin,
    check_target_arguments,
)
from airflow_ray_provider.operators.templated import coerce_rendered, is_template, rendered_number

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

JOB_URL_XCOM_KEY = "ray_job_url"


class RayJobLink(BaseOperatorLink):
    """Extra link: the job's page in the Ray dashboard."""

    name = "Ray job"

    @property
    def xcom_key(self) -> str:
        """XCom key the operator stores the job URL under."""
        return JOB_URL_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """Return the job URL the task pushed, or an empty string before submission."""
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=JOB_URL_XCOM_KEY) or ""


def _seconds(value: float | timedelta | None, name: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise RayInvalidInputError(f"{name} must be positive, got {value!r}")
    return seconds


class SubmitRayJobOperator(RayJobTargetMixin, BaseOperator):
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
    :param stop_on_kill: what a kill does to the job. ``None`` (default): a user's kill of a deferred task
        (mark failed/success, clear) stops it, a SIGTERM of the worker (pod eviction, worker shutdown,
        deploy) leaves it running so the retry re-attaches; ``True``: both stop it (a retry then submits
        ``-a2``); ``False``: neither does.
    :param retry_attempts: attempts per Job API call on transient failures.
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
    )
    template_fields_renderers = {"runtime_env": "json", "metadata": "json", "cluster": "json"}
    operator_extra_links = (RayJobLink(),)
    ui_color = "#d6e9ff"

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_target_arguments(cluster, ray_conn_id)
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
        self.retry_attempts = retry_attempts
        self._submission_id: str | None = None

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
        ti = context["ti"]
        hook = self.hook
        map_index = ti.map_index if ti.map_index is not None else -1
        base = base_submission_id(ti.dag_id, ti.run_id, ti.task_id, map_index)
        plan = submit_or_attach(base, hook.list_jobs, lambda sid: hook.submit_job(spec, sid))
        sid = self._submission_id = plan.submission_id
        self._log_plan(plan.action, sid, [job.submission_id for job in plan.previous])
        job_url = dashboard_job_url(hook.config.dashboard_url, sid)
        ti.xcom_push(key=JOB_URL_XCOM_KEY, value=job_url)
        self.log.info("Ray dashboard: %s", job_url)
        state = plan.state if plan.action is Action.DONE and plan.state else self._get(sid)
        if not self.wait_for_completion:
            return job_result(state, hook.config.dashboard_url)
        start = state.start_time / 1000.0 if state.start_time else time.time()
        offset = self._resume_offset(sid) if plan.action is Action.ATTACH and self.stream_logs else 0
        if self.deferrable and not state.is_terminal:
            self._defer(sid, start, offset)
        state, _ = self._wait(sid, state, start, offset)
        return self._finish(state)

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

    def _stream(self, sid: str, offset: int, *, final: bool) -> int:
        lines, offset = new_log_lines(self.hook.get_job_logs(sid), offset, final=final)
        emit_lines(self.log, lines)
        return offset

    def _wait(self, sid: str, state: JobState, start: float, offset: int = 0) -> tuple[JobState, int]:
        """Poll in this worker until the job is terminal; stop it and fail on ``job_timeout``."""
        while True:
            if self.stream_logs:
                offset = self._stream(sid, offset, final=state.is_terminal)
            if state.is_terminal:
                return state, offset
            if self.job_timeout is not None and time.time() >= start + self.job_timeout:
                stopped = self.hook.stop_job(sid)
                raise timeout_error(sid, self.job_timeout, self._logs_best_effort(sid), stopped=stopped)
            time.sleep(self.poll_interval)
            if getattr(self, "_left_running_on_kill", False):  # on_kill left the job running: stop waiting
                raise RayProviderError(f"the task was killed while it waited for Ray job {sid!r}")
            state = self._get(sid)

    def _defer(self, sid: str, start: float, offset: int = 0) -> None:
        from airflow_ray_provider.triggers.ray_job import RayJobTrigger

        conn_id, cluster = self._target
        trigger = RayJobTrigger(
            submission_id=sid,
            ray_conn_id=conn_id,
            cluster=cluster,
            poll_interval=self.poll_interval,
            timeout=self.job_timeout,
            start_time=start,
            log_offset=offset,
            stream_logs=self.stream_logs,
            stop_on_timeout=True,
            stop_on_cancel=self.stop_on_kill is not False,  # the trigger's on_kill is a user's kill
            retry_attempts=self.retry_attempts,
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def _logs_best_effort(self, sid: str) -> str:
        """The job's log for a final flush or an error message; best effort, never hiding the outcome."""
        try:
            return self.hook.get_job_logs(sid)
        except Exception as exc:
            self.log.warning("Could not read the log of Ray job %s: %s", sid, exc)
            return ""

    def _finish(self, state: JobState) -> dict[str, str]:
        logs = "" if state.is_success else self._logs_best_effort(state.submission_id)
        raise_for_state(state, logs, tail_lines=self.log_tail_lines)
        self.log.info("Ray job %s SUCCEEDED", state.submission_id)
        return job_result(state, self.hook.config.dashboard_url)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, str]:
        """Resume after the trigger fired: flush the log tail, then succeed or raise."""
        event = validate_event(event)
        sid = self._submission_id = event["submission_id"]
        if event["status"] == EVENT_ERROR:
            raise RayProviderError(f"waiting for Ray job {sid!r} failed in the triggerer: {event['message']}")
        if event["status"] == EVENT_TIMEOUT:
            stopped = event["message"] == "stopped"
            raise timeout_error(sid, self.job_timeout or 0, self._logs_best_effort(sid), stopped=stopped)
        state = JobState.from_dict(event["job"])
        if self.stream_logs:  # lines the trigger had not written yet (normally none)
            text = self._logs_best_effort(sid)
            emit_lines(self.log, new_log_lines(text, int(event.get("log_offset") or 0), final=True)[0])
        return self._finish(state)

    def on_kill(self) -> None:
        """SIGTERM of the running task: stop the job only when ``stop_on_kill=True`` (see the class doc)."""
        # A stopped job ends the wait by itself (STOPPED); one left running must not be waited for.
        self._left_running_on_kill = not self.stop_on_kill
        if self._submission_id and not self.stop_on_kill:
            self.log.info(
                "Leaving Ray job %s running on kill: a retry re-attaches to it (stop_on_kill=True stops it)",
                self._submission_id,
            )
        if self._submission_id and self.stop_on_kill:
            stopped = self.hook.stop_job(self._submission_id)
            self.log.info("Stopped Ray job %s on kill (was running: %s)", self._submission_id, stopped)

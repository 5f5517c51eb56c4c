"""``RayJobSensor``: wait for a Ray job that something else submitted (poke, reschedule or deferrable)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf

from airflow_ray_provider.airflow_errors import AirflowErrors
from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.jobs.events import JobDone, JobTimedOut, JobWaitFailed, parse_job_event
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES
from airflow_ray_provider.jobs.outcome import job_result, raise_for_state
from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.launch import Action, Observation, WaitPlan, observe, step
from airflow_ray_provider.operators.job_target import RayJobTargetMixin, check_target_arguments

if TYPE_CHECKING:
    from airflow.sdk import Context


class RayJobSensor(AirflowErrors, RayJobTargetMixin, BaseSensorOperator):
    """Wait until a Ray job finishes; succeed on SUCCEEDED, fail on FAILED / STOPPED.

    For jobs submitted with ``SubmitRayJobOperator(wait_for_completion=False)`` or by other systems.
    XCom (return value): ``{"submission_id", "status", "dashboard_url", "job_url"}``.

    :param submission_id: the job's submission id (templated; e.g. from the submit task's XCom).
    :param cluster: a cluster handle (or use ``ray_conn_id``).
    :param ray_conn_id: a ``ray`` connection (default ``ray_default`` when no cluster is given).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param missing_ok: keep waiting while no job has this id yet (default: fail at once).
    :param log_tail_lines: log lines carried by the error of a failed job.
    :param retry_attempts: attempts per Job API call on transient failures.
    """

    template_fields = ("submission_id", "cluster", "ray_conn_id")

    def __init__(
        self,
        *,
        submission_id: str,
        cluster: Any = None,
        ray_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        missing_ok: bool = False,
        log_tail_lines: int = DEFAULT_TAIL_LINES,
        retry_attempts: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_target_arguments(cluster, ray_conn_id)
        self.submission_id = submission_id
        self.cluster = cluster
        self.ray_conn_id = ray_conn_id
        self.deferrable = deferrable
        self.missing_ok = missing_ok
        self.log_tail_lines = log_tail_lines
        self.retry_attempts = retry_attempts

    def _logs_for_error(self, sid: str) -> str:
        try:
            return self.hook.get_job_logs(sid)
        except Exception as exc:  # best effort: never hide the job's own failure
            self.log.warning("Could not read the log of Ray job %s: %s", sid, exc)
            return ""

    def _check(self, seen: Observation[JobState]) -> PokeReturnValue:
        """One look through the wait's step function (a poke is one step of the wait)."""
        decided = step(WaitPlan(start_time=seen.now, stream_logs=False, missing_ok=self.missing_ok), seen)
        if seen.subject is None:
            if decided.action is Action.WAIT:
                self.log.info("No Ray job %s yet", self.submission_id)
                return PokeReturnValue(is_done=False)
            raise RayProviderError(
                f"no Ray job {self.submission_id!r} on {self.hook.config.dashboard_url}; "
                "check the id (or set missing_ok=True to wait for it to appear)"
            )
        self.log.info("Ray job %s is %s", seen.subject.submission_id, seen.subject.status.value)
        if decided.action is Action.WAIT:
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._result(seen.subject))

    def _result(self, state: JobState) -> dict[str, str]:
        """The XCom of a SUCCEEDED job; a FAILED / STOPPED one raises with its log tail."""
        logs = "" if state.is_success else self._logs_for_error(state.submission_id)
        raise_for_state(state, logs, tail_lines=self.log_tail_lines)
        return job_result(state, self.hook.config.dashboard_url)

    def poke(self, context: Context) -> PokeReturnValue:
        """One status check."""
        if not self.submission_id or not str(self.submission_id).strip():
            raise RayInvalidInputError("submission_id is empty")
        plan = WaitPlan(start_time=0.0, stream_logs=False)
        return self._check(observe(self.hook, self.submission_id, plan))

    def execute(self, context: Context) -> Any:
        """Poke / reschedule as usual, or check once and defer."""
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        from airflow_ray_provider.triggers.ray_job import RayJobTrigger

        conn_id, cluster = self._target
        trigger = RayJobTrigger(
            submission_id=self.submission_id,
            ray_conn_id=conn_id,
            cluster=cluster,
            poll_interval=self.poke_interval,
            timeout=self.timeout,
            stream_logs=False,
            retry_attempts=self.retry_attempts,
            cleanup_policy="never",  # a sensor watches a job it does not own: it never stops it
        )
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, str]:
        """Resume after the trigger fired (without an event, e.g. after a worker crash: look again)."""
        from airflow.sdk.exceptions import AirflowSensorTimeout

        if event is None:
            self.log.info("Resumed without a trigger event: looking at Ray job %s again", self.submission_id)
            return self.execute(context)
        typed = parse_job_event(event)
        if isinstance(typed, JobWaitFailed):
            raise RayProviderError(
                f"waiting for Ray job {typed.submission_id!r} failed in the triggerer: {typed.message}"
            )
        if isinstance(typed, JobTimedOut):
            raise AirflowSensorTimeout(f"Ray job {typed.submission_id!r} did not finish in {self.timeout}s")
        assert isinstance(typed, JobDone)
        return self._result(typed.state)

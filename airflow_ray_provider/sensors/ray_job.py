"""``RayJobSensor``: wait for a Ray job that something else submitted; a poke is one step of the wait of a
:class:`~airflow_ray_provider.launch.JobRun` with ``cleanup="never"`` (it never stops a job it does not own).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.hooks.ray_job import check_target_arguments, job_api_target
from airflow_ray_provider.jobs.outcome import DEFAULT_TAIL_LINES
from airflow_ray_provider.launch import Cleanup, JobRun
from airflow_ray_provider.operators.base import DEFAULT_DEFERRABLE, check_event, resumed_run

if TYPE_CHECKING:
    from airflow.sdk import Context


class RayJobSensor(BaseSensorOperator):
    """Wait until a Ray job finishes; succeed on SUCCEEDED, fail on FAILED / STOPPED. XCom as
    ``SubmitRayJobOperator``'s.

    :param cluster: a cluster handle (or ``ray_conn_id``, default ``ray_default``).
    :param missing_ok: keep waiting while no job has this id yet (default: fail at once).
    """

    template_fields = ("submission_id", "cluster", "ray_conn_id")

    def __init__(
        self,
        *,
        submission_id: str,
        cluster: Any = None,
        ray_conn_id: str | None = None,
        deferrable: bool = DEFAULT_DEFERRABLE,
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
        self.missing_ok, self.log_tail_lines = missing_ok, log_tail_lines
        self.retry_attempts = retry_attempts

    def _run(self) -> JobRun:
        if not self.submission_id or not str(self.submission_id).strip():
            raise RayInvalidInputError("submission_id is empty")
        target = job_api_target(self.cluster, self.ray_conn_id, retry_attempts=self.retry_attempts)
        return JobRun(
            target, submission_id=self.submission_id, cleanup=Cleanup.NEVER, stream_logs=False,
            missing_ok=self.missing_ok, poll_interval=self.poke_interval, tail_lines=self.log_tail_lines,
            say=self.log.info,
        )  # fmt: skip

    def poke(self, context: Context) -> PokeReturnValue:
        """One step of the wait."""
        with self._run() as run:
            waiting = run.look_once().ending is None
            if run.subject is None and not waiting:
                raise RayProviderError(
                    f"no Ray job {self.submission_id!r} on {run.target.dashboard_url}; check the id (or set "
                    "missing_ok=True to wait for it to appear)"
                )
            status = run.subject.status.value if run.subject is not None else "not there yet"
            self.log.info("Ray job %s is %s", self.submission_id, status)
            return PokeReturnValue(is_done=not waiting, xcom_value=None if waiting else run.result())

    def execute(self, context: Context) -> Any:
        """Poke / reschedule as usual, or check once and defer."""
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        from airflow_ray_provider.triggers.ray_job import RayJobTrigger

        with self._run() as run:
            run.submit()
            trigger = RayJobTrigger(run=run.hand_over())
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger fired (without an event: look again)."""
        if event is None:
            self.log.info("Resumed without a trigger event: looking at Ray job %s again", self.submission_id)
            return self.execute(context)
        with resumed_run(event, say=self.log.info) as run:
            check_event(run, event)
            return run.result()

"""The Airflow shell of a run: :class:`RunOperator`, the base of every operator that runs one Ray job (a
subclass says where it goes; :class:`~airflow_ray_provider.launch.JobRun` runs it), and its "Ray job" link.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator, BaseOperatorLink, conf

from airflow_ray_provider.clusters import TaskIdentity
from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.hooks.ray_job import emit_lines, target_from_ref
from airflow_ray_provider.jobs.outcome import DEFAULT_TAIL_LINES, job_result
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    base_submission_id,
    build_entrypoint,
    build_metadata,
    check_entrypoint_reservation,
    check_runtime_env,
)
from airflow_ray_provider.launch import Cleanup, Ending, JobRun, UsageOptions
from airflow_ray_provider.launch.usage import Prices, check_prices_on_cluster, parse_prices
from airflow_ray_provider.operators.lineage import (
    JobIO,
    check_lineage_namespaces,
    check_uris,
    operator_lineage,
    publish_usage,
    workload_io,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

    from airflow_ray_provider.launch import RunTarget

DEFAULT_DEFERRABLE = conf.getboolean("operators", "default_deferrable", fallback=False)
JOB_URL_XCOM_KEY = "ray_job_url"
#: What :class:`RayJobLink` reads: the URL pushed in this process, or that it resumed a deferred task.
LINK_ATTRIBUTE, RESUMED_ATTRIBUTE = "_ray_job_url", "_resumed_from_trigger"
RESERVATION = ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources")


def positive(value: float, name: str) -> float:
    """``value`` as a positive number of seconds (:class:`RayInvalidInputError` naming ``name``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise RayInvalidInputError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def task_identity(context: Context) -> TaskIdentity:
    """Who runs, from the task context (without the try number)."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return TaskIdentity(
        ti.dag_id, context.get("run_id") or ti.run_id, ti.task_id, -1 if map_index is None else map_index
    )


def base_id(context: Context) -> str:
    """The task instance's base submission id (also a RayJob's job id)."""
    return base_submission_id(*dataclasses.astuple(task_identity(context)))


def connection_prices(conn_id: str | None) -> Prices | None:
    """The ``prices`` extra of a connection, if any (:class:`RayInvalidInputError` naming it if malformed)."""
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson or {}
    except Exception:
        return None  # a missing connection is reported where it is used, not here
    return parse_prices(extra.get("prices"), source=f"connection {conn_id!r} extra 'prices'")


def is_template(value: Any) -> bool:
    """Whether ``value`` is a Jinja template string (rendered later, checked then)."""
    return isinstance(value, str) and any(mark in value for mark in ("{{", "{%", "{#"))


def is_literal(value: Any) -> bool:
    """Whether ``value`` is used as the DAG file writes it: ``None``, numbers, strings without Jinja, and
    lists, tuples and dicts of those."""
    if isinstance(value, dict):
        return all(is_literal(key) and is_literal(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(is_literal(item) for item in value)
    return value is None or (isinstance(value, int | float | str) and not is_template(value))


def rendered_number(value: Any, name: str, kind: str = "float") -> int | float | None:
    """``value`` (``None``, a number, a rendered ``"30"``) as a ``float``, an ``int`` or positive ``seconds``
    (from a ``timedelta`` too); else :class:`RayInvalidInputError` naming ``name``."""
    number = value.total_seconds() if kind == "seconds" and isinstance(value, timedelta) else value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = math.nan
        if math.isnan(number):
            raise RayInvalidInputError(
                f"{name} must be a number; it rendered to {value!r}: fix the template or the value it reads"
            )
    elif isinstance(number, bool) or not isinstance(number, int | float | None):
        raise RayInvalidInputError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if number is None or kind == "float":
        return number
    if kind == "seconds":
        return positive(number, name)
    if float(number) != int(number):
        raise RayInvalidInputError(f"{name} must be a whole number, got {value!r}")
    return int(number)


class RayJobLink(BaseOperatorLink):
    """Extra link: the job's page in the Ray dashboard (``""`` before the task submitted: a missing XCom
    would log an error when the task runner asks at the task's end)."""

    name = "Ray job"
    xcom_key = JOB_URL_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The job URL of this task, or ``""``."""
        url = getattr(operator, LINK_ATTRIBUTE, None)
        if url is not None:
            return str(url)
        if not getattr(operator, RESUMED_ATTRIBUTE, False):
            return ""  # nothing submitted in this process, nor in the one that deferred
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=JOB_URL_XCOM_KEY) or ""


def push_job_url(operator: BaseOperator, ti: Any, url: str) -> None:
    """Push the job's link XCom and keep it for :class:`RayJobLink` in this process."""
    setattr(operator, LINK_ATTRIBUTE, url)
    ti.xcom_push(key=JOB_URL_XCOM_KEY, value=url)


def resumed_run(event: Any, **callbacks: Any) -> JobRun:
    """The run a :class:`~airflow_ray_provider.triggers.RayJobTrigger` event hands back."""
    if not isinstance(event, dict) or not isinstance(event.get("run"), dict):
        raise RayProviderError(f"unexpected trigger event: {event!r}")
    state = event["run"]
    return JobRun.from_state(state, target_from_ref(state["target"]), **callbacks)


def check_event(run: JobRun, event: dict[str, Any]) -> None:
    """Raise the error of a trigger whose wait failed (inside the run, which ends as it says)."""
    if event.get("error"):
        raise RayProviderError(
            f"waiting for Ray job {run.submission_id!r} failed in the triggerer: {event['error']}"
        )


class RunOperator(BaseOperator):
    """Run one Ray job through :class:`~airflow_ray_provider.launch.JobRun` (arguments: docs/operators.md).

    :param entrypoint: shell command, or a list of arguments (quoted with ``shlex.join``).
    :param cleanup: ``never``, ``on_exception`` or ``always``: what a timeout, a kill or the task's end
        does to the job and to a cluster the task created (docs/launch.md, "Cleanup").
    :param prices: price per resource-hour for the usage record (default: the connection's ``prices``).
    :param artifact_uri: where ``usage.json`` goes (default: a workload entrypoint's ``output_uri``).
    :param lineage_inputs: URIs the job reads, for OpenLineage (a workload entrypoint names its own).
    """

    operator_extra_links = (RayJobLink(),)
    default_cleanup: ClassVar[Cleanup] = Cleanup.ON_EXCEPTION
    #: Attributes that may be Jinja numbers, and their kind (:func:`rendered_number`, once rendered).
    templated_numbers: ClassVar[dict[str, str]] = {
        "entrypoint_num_cpus": "float",
        "entrypoint_num_gpus": "float",
    }
    #: ``SubmitRayJobOperator``'s arguments.
    wait_for_completion: bool = True
    job_timeout: float | None = None
    entrypoint_memory: int | None = None
    #: The reservation the job carries (a RayJob's options carry it instead).
    reservation: ClassVar[tuple[str, ...]] = RESERVATION
    #: The usage record's ``mode`` (a pool's stays ``pool``); ``None``: the target's.
    usage_mode: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        entrypoint: str | list[str],
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_resources: dict[str, float] | None = None,
        cleanup: str | Cleanup | None = None,
        deferrable: bool = DEFAULT_DEFERRABLE,
        poll_interval: float = 5.0,
        stream_logs: bool = True,
        log_tail_lines: int = DEFAULT_TAIL_LINES,
        prices: dict[str, Any] | Prices | None = None,
        artifact_uri: str | None = None,
        record_usage: bool = True,
        lineage_inputs: list[str] | None = None,
        lineage_outputs: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.entrypoint = entrypoint
        self.runtime_env = runtime_env
        self.metadata = metadata
        self.entrypoint_num_cpus = entrypoint_num_cpus
        self.entrypoint_num_gpus = entrypoint_num_gpus
        self.entrypoint_resources = entrypoint_resources
        self.cleanup = Cleanup(cleanup) if cleanup is not None else self.default_cleanup
        self.deferrable = deferrable
        self.poll_interval = positive(poll_interval, "poll_interval")
        self.stream_logs, self.log_tail_lines = stream_logs, log_tail_lines
        self.prices = parse_prices(prices)  # bad prices fail when the DAG is parsed
        self.artifact_uri = artifact_uri
        self.record_usage = record_usage
        self.lineage_inputs = check_uris(lineage_inputs, "lineage_inputs")
        self.lineage_outputs = check_uris(lineage_outputs, "lineage_outputs")
        #: The task's run, once it began.
        self.run: JobRun | None = None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the templated fields, then make the templated numbers numbers (naming a bad one)."""
        super().render_template_fields(context, jinja_env)
        for name, kind in self.templated_numbers.items():
            setattr(self, name, rendered_number(getattr(self, name), name, kind))

    def literal(self, name: str) -> Any:
        """The argument ``name`` as the DAG file writes it, or ``None`` for Jinja or an upstream value."""
        value = getattr(self, name)
        return value if is_literal(value) else None

    def check_literals(self) -> None:
        """Check the literal job arguments when the DAG is parsed (the rest in :meth:`job`)."""
        if self.literal("entrypoint") is not None:
            build_entrypoint(self.entrypoint)
        if self.literal("runtime_env") is not None:
            check_runtime_env(self.runtime_env, local_paths=False)
        build_metadata(self.literal("metadata"))
        check_entrypoint_reservation(*map(self.literal, RESERVATION))

    def job(self, context: Context) -> JobSpec:
        """The rendered job, checked before any cluster or job exists; no I/O."""
        keys = {**dataclasses.asdict(task_identity(context)), "try_number": context["ti"].try_number}
        return JobSpec(
            entrypoint=build_entrypoint(self.entrypoint), runtime_env=check_runtime_env(self.runtime_env),
            metadata=build_metadata(self.metadata, task_instance=keys),
            **{name: getattr(self, name) for name in self.reservation},
        )  # fmt: skip

    def target(self, context: Context) -> RunTarget:
        """Where the job goes (no I/O yet)."""
        raise NotImplementedError

    def usage(self, target: RunTarget) -> UsageOptions | None:
        """The usage record's fields (``None`` without ``record_usage``)."""
        if not self.record_usage:
            return None
        mode, cluster, own, note, conn_id = target.usage_facts()
        prices = self.prices or connection_prices(conn_id)
        reserved = {str(k): float(v) for k, v in (self.entrypoint_resources or {}).items()}
        for name, attribute in zip(("CPU", "GPU", "memory"), RESERVATION, strict=False):
            if value := getattr(self, attribute):
                reserved[name] = float(value)
        return UsageOptions(mode=mode if mode == "pool" else self.usage_mode or mode, cluster=cluster,
                            own_cluster=own, entrypoint=reserved, prices=prices.to_dict() if prices else None,
                            teardown_note=note)  # fmt: skip

    def result(self, run: JobRun) -> Any:
        """The task's XCom from a run whose wait ended (raises for every ending but success)."""
        return run.result()

    def job_submitted(self) -> None:
        """Called once the job is submitted or found (Ray has uploaded its local files), and again at the end
        of :meth:`execute` (a failure before the submission)."""

    def _callbacks(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowTaskTimeout

        return {
            "on_lines": lambda lines: emit_lines(self.log, lines),
            "say": self.log.info,
            "on_link": lambda url: push_job_url(self, context["ti"], url),
            "timeout_errors": (AirflowTaskTimeout,),
        }

    def execute(self, context: Context) -> Any:
        """Check everything, then run the job: submit it (or re-attach), wait here or defer, end."""
        try:
            job = self.job(context)
            check_lineage_namespaces(self.job_io())  # a bad OpenLineage dataset fails before the job exists
            target = self.target(context)
            run = self.run = JobRun(
                target, job=job, base_id=base_id(context), cleanup=self.cleanup, timeout=self.job_timeout,
                poll_interval=self.poll_interval, stream_logs=self.stream_logs, usage=self.usage(target),
                tail_lines=self.log_tail_lines, **self._callbacks(context),
            )  # fmt: skip
            with run:
                run.reach()
                self.check_prices(run)
                run.submit()
                self.job_submitted()
                if not self.wait_for_completion:
                    return job_result(run.subject, run.target.dashboard_url or "")
                if self.deferrable and not run.finished:
                    from airflow_ray_provider.triggers.ray_job import RayJobTrigger

                    self.defer(trigger=RayJobTrigger(run=run.hand_over()), method_name="execute_complete")
                run.wait()
                return self.result(run)
        finally:
            self.job_submitted()
            self.publish(context)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Go on with the run the trigger handed back (without an event, after a worker died between the event
        and this call: run the task again, which re-attaches)."""
        setattr(self, RESUMED_ATTRIBUTE, True)
        if event is None:
            self.log.info("Resumed without a trigger event: looking at this task instance's Ray job again")
            return self.execute(context)
        run = self.run = resumed_run(event, **self._callbacks(context))
        try:
            with run:
                check_event(run, event)
                run.flush()
                return self.result(run)
        finally:
            self.publish(context)

    def on_kill(self) -> None:
        """A SIGTERM of the worker: the run ends as the cleanup table says for it."""
        if self.run is not None and not self.run.handed_over and self.run.ending is None:
            self.run.kill(Ending.WORKER_SIGTERM)

    def check_prices(self, run: JobRun) -> None:
        """Refuse prices for resources the reached cluster lacks, before submitting."""
        prices = parse_prices(run.usage.prices) if run.usage is not None else None
        client = run.target.dashboard() if prices is not None else None
        why = check_prices_on_cluster(client.reader(), prices) if client and prices else None
        if why:
            self.log.warning("Could not check the prices against the cluster's resources: %s", why)

    def publish(self, context: Context) -> None:
        """Publish the run's usage record, once made (XCom, ``usage.json``, its log line)."""
        record = self.run.record if self.run is not None else None
        if record:
            publish_usage(record, ti=context.get("ti"), artifact_uri=self.job_io().artifact_uri, log=self.log)

    def job_io(self) -> JobIO:
        """What the job reads and writes: its workload's URIs and ``lineage_inputs``/``lineage_outputs``."""
        found = workload_io(self.entrypoint) if not is_template(self.entrypoint) else JobIO()
        inputs, outputs = (*found.inputs, *self.lineage_inputs), (*found.outputs, *self.lineage_outputs)
        return JobIO(inputs, outputs, self.artifact_uri or found.artifact_uri)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the job's inputs and outputs, and the ``rayJob`` run facet (ids, cluster, usage)."""
        run = self.run
        options, record = (run.usage, run.record or {}) if run is not None else (None, {})
        facts = {"mode": options.mode if options else "standing", "cluster": options and options.cluster}
        if run is not None:
            facts.update(submission_id=run.submission_id, dashboard_url=run.target.dashboard_url)
        return operator_lineage(self.job_io(), {**facts, **record, "usage": record or None})

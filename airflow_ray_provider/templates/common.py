"""Pieces every DAG template shares: where the Ray work runs, how a workload gets its config, and how
one task's XCom reaches the next.

Nothing here imports Ray, pandas or pyarrow (nor Airflow at module level): DAG files that use the
templates parse fast.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, XComArg

_T = TypeVar("_T")

#: The run's day as ``YYYY-MM-DD``, for partition paths: the logical date's day, else (a run without a
#: logical date: ``airflow dags trigger`` without ``--logical-date``, the REST API's ``logical_date: null``,
#: an asset-triggered run) the day of the run's ``run_after``. Airflow 3 leaves ``{{ ds }}``,
#: ``{{ logical_date }}`` and ``{{ data_interval_start }}`` undefined in such a run, so a template that
#: uses them fails to render; write ``"s3://logs/dt=" + RUN_DATE`` instead of ``".../dt={{ ds }}"``.
RUN_DATE = "{{ (dag_run.logical_date or dag_run.run_after) | ds }}"
#: :data:`RUN_DATE` without dashes (``YYYYMMDD``), the fallback for ``{{ ds_nodash }}``.
RUN_DATE_NODASH = "{{ (dag_run.logical_date or dag_run.run_after) | ds_nodash }}"

#: Jinja-templated run identity copied into every artifact (``run.run_info``); defined for every run
#: (``logical_date`` renders ``None`` in a run without one).
RUN_INFO = {
    "dag_id": "{{ dag.dag_id }}",
    "run_id": "{{ run_id }}",
    "logical_date": "{{ dag_run.logical_date }}",
    "run_after": "{{ dag_run.run_after }}",
    "task_id": "{{ task.task_id }}",
    "try_number": "{{ ti.try_number }}",
}


#: How a template runs its Ray work (:attr:`ClusterSettings.mode`).
Mode = Literal["ephemeral", "rayjob", "standing", "one_task", "pool"]
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True)
class ClusterSettings:
    """Where and how the template's Ray jobs run; ``mode`` switches between the five ways.

    * ``ephemeral`` (the default): a cluster per run (per application for zone training), created by a
      setup task and deleted by a teardown task; a **local** Ray head without ``conn_id``, a **KubeRay**
      RayCluster through that ``kuberay`` connection, shaped by ``spec``;
    * ``rayjob``: every Ray job is a KubeRay **RayJob** (``KubeRayJobOperator``) on a cluster of its own
      that KubeRay creates from ``spec`` and deletes; needs ``conn_id`` (a ``kuberay`` connection);
    * ``standing``: jobs run on a **standing cluster** never deleted by the DAG: ``cluster_name`` (a
      RayCluster in ``conn_id``'s namespace, or a running local head without ``conn_id``, attached by an
      ``attach_cluster`` task), or ``ray_conn_id`` (a ``ray`` connection, e.g. the Ray head of
      ``docker-compose.yaml``);
    * ``one_task``: every Ray job is one task that creates its cluster, runs the job and deletes the
      cluster (``EphemeralRayJobOperator``; local without ``conn_id``, KubeRay with it);
    * ``pool``: every Ray job is one task on the shared cluster named by ``pool`` (``EphemeralRayJobOperator``
      with ``cluster_pool``): the first task that needs it creates it from ``spec``, the others (of this run,
      later runs, other DAGs and laptop runs naming the pool) lease it, and it is deleted ``idle_ttl``
      seconds after its last lease ends.

    Without ``mode``: ``standing`` when ``ray_conn_id`` or ``cluster_name`` is set, ``pool`` when ``pool``
    is, else ``ephemeral``.

    :param conn_id: ``kuberay`` connection (``None``: local backend).
    :param spec: cluster spec dict (image, head, worker groups, ...); the local backend sizes itself from it.
    :param ray_conn_id: submit to this standing cluster's ``ray`` connection.
    :param local_options: options of the local backend (``num_cpus``, ``env``, ...; see
        :class:`airflow_ray_provider.local.LocalClusterOptions`).
    :param create_kwargs: extra keyword arguments for :class:`CreateRayClusterOperator`.
    :param python: interpreter used in job entrypoints; default ``python`` on a cluster, and the
        interpreter running Airflow for the local backend (the local head shares its environment).
    :param mode: ``ephemeral``, ``rayjob``, ``standing``, ``one_task`` or ``pool`` (see above).
    :param cluster_name: the standing cluster to attach (``standing`` mode).
    :param job_kwargs: extra keyword arguments of every job operator of the mode (e.g. ``backoff_limit``
        or ``ttl_seconds_after_finished`` of a RayJob, ``ready_timeout`` of one task).
    :raises ValueError: for a combination the mode cannot run.
    """

    conn_id: str | None = None
    spec: dict[str, Any] | None = None
    ray_conn_id: str | None = None
    local_options: dict[str, Any] | None = None
    create_kwargs: dict[str, Any] = field(default_factory=dict)
    python: str | None = None
    mode: Mode | None = None
    cluster_name: str | None = None
    job_kwargs: dict[str, Any] = field(default_factory=dict)
    pool: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.ray_conn_id and (self.conn_id or self.spec or self.cluster_name):
            raise ValueError(
                "ray_conn_id submits to an existing cluster; drop cluster_conn_id/cluster_spec/cluster_name, "
                "or drop ray_conn_id to create an ephemeral cluster per run"
            )
        mode = self.resolved_mode
        standing = bool(self.ray_conn_id or self.cluster_name)
        if mode == "standing" and not standing:
            raise ValueError("mode='standing' needs cluster_name (a RayCluster or local head) or ray_conn_id")
        if mode == "standing" and self.spec:
            raise ValueError("mode='standing' runs on a cluster someone else sized: drop spec")
        if mode != "standing" and standing:
            raise ValueError(f"mode={mode!r} makes its own clusters: drop ray_conn_id/cluster_name")
        if mode == "rayjob" and (not self.conn_id or self.local_options):
            raise ValueError(
                "mode='rayjob' runs each job as a KubeRay RayJob: set conn_id to a kuberay connection (and "
                "drop local_options); for a local run use mode='one_task' or 'ephemeral'"
            )
        if mode == "pool" and not (self.pool or {}).get("name"):
            raise ValueError("mode='pool' needs pool={'name': ...}: the name of the cluster its jobs share")
        if mode != "pool" and self.pool:
            raise ValueError(f"pool names a shared cluster, but mode={mode!r}: use mode='pool' or drop pool")

    @property
    def resolved_mode(self) -> Mode:
        """The mode in effect (``mode``, else derived from ``ray_conn_id`` / ``cluster_name`` / ``pool``)."""
        if self.mode is not None:
            return self.mode
        if self.ray_conn_id or self.cluster_name:
            return "standing"
        return "pool" if self.pool else "ephemeral"

    @property
    def ephemeral(self) -> bool:
        """Whether the template creates (and deletes) a cluster per run in setup/teardown tasks."""
        return self.resolved_mode == "ephemeral"

    @property
    def is_local(self) -> bool:
        """Whether jobs run on a local head (same machine and Python as Airflow)."""
        return not self.conn_id and not self.ray_conn_id and self.resolved_mode != "rayjob"

    @property
    def interpreter(self) -> str:
        """The ``python`` of job entrypoints."""
        return self.python or (sys.executable if self.is_local else "python")


#: A template DAG's start date (year, month, day, UTC) unless ``dag_kwargs`` names one.
DEFAULT_START_DATE = (2000, 1, 1)


def dag_arguments(tags: list[str], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """A template DAG's :class:`~airflow.sdk.DAG` arguments: no catch-up, an early start date, ``tags``.

    The default start date (:data:`DEFAULT_START_DATE`, 2000-01-01) lies before any date a user tests or
    backfills (with a later one, ``dag.test()`` for an earlier date creates no task instances and reports
    success); with ``catchup=False`` the scheduler still runs only the latest interval.

    :param tags: the template's DAG tags.
    :param overrides: the factory's ``dag_kwargs``; they win.
    """
    arguments = {"catchup": False, "tags": tags, **(overrides or {})}
    if "start_date" not in arguments:
        import pendulum

        arguments["start_date"] = pendulum.datetime(*DEFAULT_START_DATE, tz="UTC")
    return arguments


def workload_entrypoint(python: str, module: str, config: dict[str, Any], *extra: str) -> list[str]:
    """``[python, -m, module, --config-json, <json>, *extra]``: the config travels inline, no file to ship.

    Jinja in string values (e.g. :data:`RUN_DATE`) is rendered by the submitting operator (the entrypoint is a
    templated field). ``json.dumps`` never writes ``{{`` for nested mappings (it puts ``"`` after ``{``),
    so the JSON itself cannot be mistaken for a template.
    """
    return [python, "-m", module, "--config-json", json.dumps(config, sort_keys=True), *extra]


def create_cluster_task(
    settings: ClusterSettings, *, task_id: str = "create_cluster", spec: Any = None
) -> BaseOperator:
    """The setup task that provisions the cluster (its XCom is the cluster handle)."""
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    kwargs: dict[str, Any] = dict(settings.create_kwargs)
    chosen = spec if spec is not None else settings.spec
    if chosen is not None:
        kwargs["spec"] = chosen
    if settings.conn_id:
        kwargs["cluster_conn_id"] = settings.conn_id
    elif settings.local_options:
        kwargs["local_options"] = dict(settings.local_options)
    return CreateRayClusterOperator(task_id=task_id, **kwargs)


def setup_task(settings: ClusterSettings, *, spec: Any = None) -> BaseOperator | None:
    """The task the mode's jobs run after: create the cluster (``ephemeral``), attach it (``standing`` by
    name), or none (``rayjob``, ``one_task``, ``pool`` and ``ray_conn_id``: each job brings or names its
    cluster)."""
    mode = settings.resolved_mode
    if mode == "ephemeral":
        return create_cluster_task(settings, spec=spec)
    if mode == "standing" and settings.cluster_name:
        from airflow_ray_provider.operators.ray_cluster import AttachRayClusterOperator

        return AttachRayClusterOperator(
            task_id="attach_cluster", cluster_name=settings.cluster_name, cluster_conn_id=settings.conn_id
        )
    return None


def teardown_task(setup: BaseOperator | None, settings: ClusterSettings) -> BaseOperator | None:
    """The teardown paired with :func:`setup_task`: only an ephemeral cluster is deleted by the DAG."""
    if setup is None or not settings.ephemeral:
        return None
    return delete_cluster_task(setup, settings)


def job_operator_class(settings: ClusterSettings) -> type[BaseOperator]:
    """The operator that runs one Ray job in the mode."""
    mode = settings.resolved_mode
    if mode == "rayjob":
        from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator

        return KubeRayJobOperator
    if mode in ("one_task", "pool"):
        from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator

        return EphemeralRayJobOperator
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    return SubmitRayJobOperator


def ray_job_task(
    settings: ClusterSettings,
    setup: BaseOperator | None,
    *,
    task_id: str,
    entrypoint: Any,
    deferrable: bool,
    poll_interval: float,
    job_timeout: float | None,
    runtime_env: Any = None,
    spec: Any = None,
    metadata: dict[str, str] | None = None,
    operator_class: type[BaseOperator] | None = None,
) -> BaseOperator:
    """One Ray job of a template, as the mode runs it.

    ``ephemeral`` / ``standing``: :class:`SubmitRayJobOperator` on the setup's cluster (or the ``ray``
    connection); ``rayjob``: :class:`KubeRayJobOperator` with ``spec`` (``job_timeout`` becomes
    ``activeDeadlineSeconds``); ``one_task``: :class:`EphemeralRayJobOperator` with ``spec``; ``pool``: the
    same on the pool's cluster.

    :param spec: this job's cluster spec (``rayjob``, ``one_task``, ``pool``; default ``settings.spec``);
        may be an upstream XCom.
    :param operator_class: a subclass of the mode's operator to use instead (see :func:`job_operator_class`).
    """
    cls = operator_class or job_operator_class(settings)
    mode = settings.resolved_mode
    kwargs: dict[str, Any] = {"task_id": task_id, "entrypoint": entrypoint, "deferrable": deferrable,
                              "poll_interval": poll_interval}  # fmt: skip
    if runtime_env is not None:
        kwargs["runtime_env"] = runtime_env
    if metadata:
        kwargs["metadata"] = metadata
    chosen = spec if spec is not None else settings.spec
    if mode == "rayjob":
        kwargs.update(cluster_conn_id=settings.conn_id, spec=chosen)
        if job_timeout:
            kwargs["active_deadline_seconds"] = math.ceil(job_timeout)
    elif mode in ("one_task", "pool"):
        kwargs.update(
            cluster_conn_id=settings.conn_id, cluster_spec=chosen, local_options=settings.local_options
        )
        if settings.pool:
            kwargs["cluster_pool"] = settings.pool
        if job_timeout:
            kwargs["job_timeout"] = job_timeout
    else:
        kwargs.update(job_target(settings, setup), wait_for_completion=True)
        if job_timeout:
            kwargs["job_timeout"] = job_timeout
    return cls(**kwargs, **settings.job_kwargs)


def delete_cluster_task(
    create: BaseOperator, settings: ClusterSettings, *, task_id: str = "delete_cluster"
) -> BaseOperator:
    """The teardown task paired with ``create``: runs whatever happened upstream.

    When the create task pushed no handle (it failed half-way), the delete operator falls back to the
    clusters this run labelled, through the same connection.
    """
    from airflow_ray_provider.operators.ray_cluster import DeleteRayClusterOperator

    delete = DeleteRayClusterOperator(
        task_id=task_id, cluster=upstream(create.output), cluster_conn_id=settings.conn_id
    )
    return delete.as_teardown(setups=create)


def job_options(
    *,
    deferrable: bool,
    poll_interval: float,
    job_timeout: float | None,
    runtime_env: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """How a template's :class:`SubmitRayJobOperator` waits for its job (keyword arguments)."""
    options: dict[str, Any] = {
        "deferrable": deferrable, "wait_for_completion": True, "poll_interval": poll_interval,
    }  # fmt: skip
    if job_timeout:
        options["job_timeout"] = job_timeout
    if runtime_env:
        options["runtime_env"] = runtime_env
    return options


def job_target(settings: ClusterSettings, create: BaseOperator | None) -> dict[str, Any]:
    """How a :class:`SubmitRayJobOperator` reaches the cluster: the setup's handle or the connection."""
    if create is not None:
        return {"cluster": upstream(create.output)}
    return {"ray_conn_id": settings.ray_conn_id}


def upstream(reference: XComArg, key: str | None = None) -> Any:
    """An upstream task's XCom (or one ``key`` of a ``multiple_outputs`` step) as an operator argument.

    Airflow replaces the reference by the value before the operator runs, and operators annotate their
    arguments with that value's type; the reference stands in for it, hence ``Any``.

    :param reference: the upstream task's output (``task.output``, or what calling a step returned).
    :param key: the XCom key to read instead of the return value.
    """
    if key is None:
        return reference
    from airflow.sdk import XComArg

    (operator,) = reference.roots
    return XComArg(operator, key=key)


def resolved(value: XComArg | _T) -> _T:
    """A step argument's value when the step runs: Airflow has replaced the XCom reference by then.

    Step arguments are annotated ``XComArg | <value type>``: the DAG passes the upstream task's output,
    the step receives its value.

    :raises TypeError: on an unresolved reference (the step function was called outside a task run).
    """
    from airflow.sdk import XComArg

    if isinstance(value, XComArg):
        raise TypeError(f"{value!r} is an XCom reference: Airflow resolves it only when the task runs")
    return value

"""Pieces every DAG template shares: where the Ray work runs, how a workload gets its config, and how
one task's XCom reaches the next.

Nothing here imports Ray, pandas or pyarrow (nor Airflow at module level): DAG files that use the
templates parse fast.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, XComArg

_T = TypeVar("_T")

#: Jinja-templated run identity copied into every artifact (``run.run_info``).
RUN_INFO = {
    "dag_id": "{{ dag.dag_id }}",
    "run_id": "{{ run_id }}",
    "logical_date": "{{ logical_date }}",
    "task_id": "{{ task.task_id }}",
    "try_number": "{{ ti.try_number }}",
}


@dataclass(frozen=True)
class ClusterSettings:
    """Where the template's Ray jobs run.

    Three modes:

    * default (nothing set): an ephemeral **local** Ray head, started by the setup task and stopped by
      the teardown task (Airflow and Ray on one machine, no Kubernetes);
    * ``conn_id`` set: an ephemeral **KubeRay** RayCluster through that ``kuberay`` connection, shaped by
      ``spec`` (see :class:`airflow_ray_provider.kuberay.spec.RayClusterSpec`);
    * ``ray_conn_id`` set: an **existing** Ray cluster behind that ``ray`` connection (no setup/teardown;
      e.g. the Ray head of ``docker-compose.yaml``).

    :param conn_id: cluster connection for :class:`CreateRayClusterOperator` (``None``: local backend).
    :param spec: cluster spec dict (image, head, worker groups, ...); the local backend sizes itself from it.
    :param ray_conn_id: submit to this standing cluster instead of creating one.
    :param local_options: options of the local backend (``num_cpus``, ``env``, ...; see
        :class:`airflow_ray_provider.local.cluster.LocalClusterOptions`).
    :param create_kwargs: extra keyword arguments for :class:`CreateRayClusterOperator`.
    :param python: interpreter used in job entrypoints; default ``python`` on a cluster, and the
        interpreter running Airflow for the local backend (the local head shares its environment).
    """

    conn_id: str | None = None
    spec: dict[str, Any] | None = None
    ray_conn_id: str | None = None
    local_options: dict[str, Any] | None = None
    create_kwargs: dict[str, Any] = field(default_factory=dict)
    python: str | None = None

    def __post_init__(self) -> None:
        if self.ray_conn_id and (self.conn_id or self.spec):
            raise ValueError(
                "ray_conn_id submits to an existing cluster; drop cluster_conn_id/cluster_spec, "
                "or drop ray_conn_id to create an ephemeral cluster per run"
            )

    @property
    def ephemeral(self) -> bool:
        """Whether the template creates (and deletes) a cluster per run."""
        return not self.ray_conn_id

    @property
    def is_local(self) -> bool:
        """Whether jobs run on an ephemeral local head (same machine and Python as Airflow)."""
        return self.ephemeral and not self.conn_id

    @property
    def interpreter(self) -> str:
        """The ``python`` of job entrypoints."""
        return self.python or (sys.executable if self.is_local else "python")


#: A template DAG's start date (year, month, day, UTC) unless ``dag_kwargs`` names one.
DEFAULT_START_DATE = (2000, 1, 1)


def dag_arguments(tags: list[str], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """A template DAG's :class:`~airflow.sdk.DAG` arguments: no catch-up, an early start date, ``tags``.

    The default start date (:data:`DEFAULT_START_DATE`, 2000-01-01) lies before any date a user tests or
    backfills (a later one made ``dag.test()`` for an earlier date create no task instances and report
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

    Jinja in string values (``{{ ds }}``) is rendered by the submitting operator (the entrypoint is a
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

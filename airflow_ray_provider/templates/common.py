"""Pieces every DAG template shares: where the Ray work runs, and how a workload gets its config.

Nothing here imports Ray, pandas or pyarrow: DAG files that use the templates parse fast.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk.bases.operator import BaseOperator

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
        task_id=task_id, cluster=create.output, cluster_conn_id=settings.conn_id
    )
    return delete.as_teardown(setups=create)


def submit_kwargs(settings: ClusterSettings, create: BaseOperator | None) -> dict[str, Any]:
    """How a :class:`SubmitRayJobOperator` reaches the cluster: the setup's handle or the connection."""
    if create is not None:
        return {"cluster": create.output}
    return {"ray_conn_id": settings.ray_conn_id}

"""Per-zone training as a DAG factory: one Ray job per model application, mapped.

For each application (dynamic task mapping over a task group)::

    plan -> create_cluster (setup) -> train (Ray job) -> collect_manifest -> retry_plan
        -> retry_failed (Ray job, only failed zones; skipped when none failed) -> collect_retry
        -> result -> delete_cluster (teardown, also on failure)

By default every application gets its **own ephemeral cluster** (its own image, Python dependencies and
resource sizing, as at Instacart); ``shared_cluster=True`` runs every application's job on one cluster
created once for the run. ``ClusterSettings(mode=...)`` runs each Ray job (``prepare``, ``train``,
``retry_failed``) as a KubeRay RayJob (``rayjob``: no create/delete tasks), on a standing cluster
(``standing``), as one task with its own cluster (``one_task``) or as one task on a shared pool cluster
(``pool``). Call :func:`build_zone_training_dag` from a DAG file (``dags/zone_training.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.templates.common import ClusterSettings, dag_arguments
from airflow_ray_provider.templates.zone_training.application import ZoneApplication

if TYPE_CHECKING:
    from airflow.sdk import DAG


def build_zone_training_dag(
    *,
    dag_id: str,
    applications: Sequence[ZoneApplication | dict[str, Any]],
    output_uri: str,
    cluster_conn_id: str | None = None,
    cluster_spec: dict[str, Any] | None = None,
    ray_conn_id: str | None = None,
    shared_cluster: bool = False,
    retry_failed_zones: bool = True,
    max_failed_fraction_after_retry: float = 0.0,
    schedule: Any = None,
    runtime_env: dict[str, Any] | None = None,
    job_timeout: float | None = None,
    deferrable: bool = True,
    poll_interval: float = 2.0,
    cluster: ClusterSettings | None = None,
    dag_kwargs: dict[str, Any] | None = None,
) -> DAG:
    """Build the per-zone training DAG (one mapped Ray job per application).

    :param dag_id: the DAG id.
    :param applications: the model applications (:class:`ZoneApplication` or dicts); mapped at run time.
    :param output_uri: artifact root; each application writes ``<output_uri>/<name>/`` (templated, e.g.
        ``"s3://ml/zones/" + RUN_DATE``; see :data:`~airflow_ray_provider.templates.RUN_DATE`).
    :param cluster_conn_id: ``kuberay`` connection for ephemeral RayClusters (``None``: local Ray heads).
    :param cluster_spec: default cluster spec (an application's own ``cluster_spec`` wins).
    :param ray_conn_id: run every job on this existing Ray cluster (no setup/teardown).
    :param shared_cluster: one cluster for all applications instead of one per application.
    :param retry_failed_zones: retrain the failed zones once with ``--only-failed``.
    :param max_failed_fraction_after_retry: failed-zone share still tolerated after the retry; above it
        the application's ``result`` task fails (the manifest says which zones).
    :param schedule: the DAG schedule.
    :param runtime_env: default Ray runtime environment (an application's own wins).
    :param job_timeout: seconds before a Ray job is stopped.
    :param deferrable: wait for Ray jobs in the triggerer.
    :param poll_interval: seconds between Ray job status polls.
    :param cluster: full :class:`ClusterSettings` (overrides the three cluster arguments); its ``mode``
        runs the jobs on ephemeral clusters, as RayJobs, on a standing cluster, one task each or on a pool.
    :param dag_kwargs: extra :class:`~airflow.sdk.DAG` arguments.
    :raises RayInvalidInputError: on empty or duplicate applications, bad names, bad fractions.
    """
    from airflow.sdk import DAG

    apps = [ZoneApplication.coerce(a) for a in applications]
    names = [a.name for a in apps]
    if not apps or len(set(names)) != len(names):
        raise RayInvalidInputError(f"applications must be a non-empty list of unique names, got {names}")
    if not 0.0 <= max_failed_fraction_after_retry <= 1.0:
        raise RayInvalidInputError("max_failed_fraction_after_retry must be in [0, 1]")
    settings = cluster or ClusterSettings(conn_id=cluster_conn_id, spec=cluster_spec, ray_conn_id=ray_conn_id)
    if shared_cluster and settings.resolved_mode in ("rayjob", "one_task", "pool"):
        raise RayInvalidInputError(
            f"shared_cluster=True creates one cluster for the run, but mode={settings.resolved_mode!r} gives "
            "every job a cluster of its own (or the pool's): use mode='ephemeral' or 'standing' to share one"
        )
    if settings.resolved_mode == "pool" and any(a.cluster_spec for a in apps):
        raise RayInvalidInputError(
            "mode='pool' runs every application on the pool's one cluster: move per-application cluster_spec "
            "into the DAG's cluster_spec, or use a pool per spec (one DAG each)"
        )
    if shared_cluster and any(a.cluster_spec for a in apps):
        raise RayInvalidInputError(
            "shared_cluster=True runs every application on one cluster: move per-application cluster_spec "
            "into the DAG's cluster_spec, or keep one cluster per application"
        )
    arguments = dag_arguments(["ray", "zone-training"], dag_kwargs)
    from airflow_ray_provider.templates.zone_training.tasks import ZoneWiring

    wiring = ZoneWiring(
        settings=settings, output_uri=output_uri, shared_cluster=shared_cluster,
        retry_failed_zones=retry_failed_zones, max_failed_after_retry=max_failed_fraction_after_retry,
        runtime_env=runtime_env, job_timeout=job_timeout, deferrable=deferrable,
        poll_interval=poll_interval,
    )  # fmt: skip
    with DAG(dag_id=dag_id, schedule=schedule, **arguments) as dag:
        wiring.wire([asdict(a) for a in apps])
    return dag

"""Nightly champion-vs-challenger validation as a DAG factory.

The DAG it builds::

    [list_challengers] -> create_cluster (setup) -> [prepare] -> evaluate (Ray job, deferrable)
        -> collect_metrics -> decide -> report -> branch -> promote | keep_champion
        -> delete_cluster (teardown, runs on failure too)

The champion faces one challenger (``challenger_uri``), a list fixed in the DAG (``challengers``), or
every model file found under a registry prefix at run time (``challenger_prefix``: the
``list_challengers`` step, :mod:`.listing`, runs before any cluster starts; a prefix with no model
file skips the run or fails it, ``on_no_challengers``). One evaluation scores them all in one pass; the
decision promotes at most one (:mod:`.decision`).

in the default ``ephemeral`` mode; ``ClusterSettings(mode=...)`` runs ``prepare`` and ``evaluate`` as
KubeRay RayJobs (``rayjob``: no create/delete tasks, KubeRay cleans up), on a standing cluster
(``standing``: an ``attach_cluster`` task, nothing deleted), as one task each (``one_task``) or as one task
each on a shared pool cluster (``pool``: warm across runs, deleted once idle).

Call :func:`build_champion_challenger_dag` from a DAG file; see ``dags/nightly_model_validation.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.templates.champion_challenger.decision import PROMOTE, DecisionPolicy, PolicyError
from airflow_ray_provider.templates.common import (
    RUN_INFO,
    ClusterSettings,
    dag_arguments,
    ray_job_task,
    setup_task,
    teardown_task,
    workload_entrypoint,
)
from airflow_ray_provider.workloads.evaluation import DEFAULT_METRICS, metric_directions

if TYPE_CHECKING:
    from airflow.sdk import DAG, Asset

    from airflow_ray_provider.templates.champion_challenger.listing import ListSpec
    from airflow_ray_provider.templates.champion_challenger.tasks import PromoteCallable

log = logging.getLogger(__name__)

EVALUATE_MODULE = "airflow_ray_provider.workloads.evaluate"


def produced_metrics(metrics: Sequence[str], ndcg_k: Sequence[int]) -> set[str]:
    """The metric keys ``metrics.json`` will hold for these metric families and k values.

    The table is the evaluation workload's own (:func:`~airflow_ray_provider.workloads.evaluation.
    metric_directions`, an import-free module), so the two never disagree.
    """
    return set(metric_directions(metrics, ndcg_k))


def _check_policy(
    policy: DecisionPolicy | dict[str, Any], metrics: Sequence[str], ndcg_k: Sequence[int]
) -> DecisionPolicy:
    try:
        policy = policy if isinstance(policy, DecisionPolicy) else DecisionPolicy.from_dict(policy)
    except PolicyError as exc:
        raise RayInvalidInputError(str(exc)) from exc
    available = produced_metrics(metrics, ndcg_k)
    missing = [m for m in policy.metrics if m not in available]
    if missing:
        raise RayInvalidInputError(
            f"the decision policy uses {missing}, which the evaluation does not compute with metrics="
            f"{list(metrics)} and ndcg_k={list(ndcg_k)}; available: {sorted(available)}"
        )
    return policy


def evaluation_config(
    *,
    models: dict[str, Any] | str,
    data_uri: str,
    columns: dict[str, Any],
    artifact_uri: str,
    metrics: Sequence[str],
    ndcg_k: Sequence[int],
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``workloads.evaluate`` config (see :mod:`airflow_ray_provider.workloads.evaluation.config`).

    :param models: ``{name: spec}``, champion first, or :data:`~.listing.MODELS_PLACEHOLDER` (filled in
        at run time from the ``list_challengers`` step).
    """
    config = {
        "data_uri": data_uri,
        "columns": dict(columns),
        "models": models,
        "baseline": "champion",
        "output_uri": artifact_uri,
        "metrics": list(metrics),
        "ndcg_k": list(ndcg_k),
        "run_info": dict(RUN_INFO),
    }
    config.update(options or {})
    return config


def check_evaluation_config(config: dict[str, Any], champion: str | Mapping[str, Any]) -> None:
    """Check the evaluation config when the DAG is parsed, with the workload's own rules
    (:meth:`~airflow_ray_provider.workloads.evaluation.config.EvalConfig.from_dict`: no data or model is
    read), so that a metric typo, ``ndcg`` without ``columns.group`` or a bad ``evaluation_options`` key
    fails here, not in the Ray job on a cluster started for it. Models listed at run time (a
    ``challenger_prefix``) are stood in for by the champion twice.

    :raises RayInvalidInputError: with the workload's message.
    """
    from airflow_ray_provider.templates.champion_challenger import listing
    from airflow_ray_provider.workloads.common.errors import ConfigError
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig

    checked = dict(config)
    if checked["models"] == listing.MODELS_PLACEHOLDER:
        spec = dict(champion) if isinstance(champion, Mapping) else {"uri": champion}
        checked["models"] = {"champion": spec, "challenger": dict(spec)}
    try:
        EvalConfig.from_dict(checked)
    except ConfigError as exc:
        raise RayInvalidInputError(f"the evaluation config: {exc}") from exc


def default_model_asset(dag_id: str) -> Asset:
    """The asset a promotion updates when none is given: ``model://<dag_id>/champion``."""
    from airflow.sdk import Asset

    return Asset(name=f"{dag_id}.champion", uri=f"model://{dag_id}/champion", group="model")


def build_champion_challenger_dag(
    *,
    dag_id: str,
    champion_uri: str | dict[str, Any],
    data_uri: str,
    columns: dict[str, Any],
    artifact_uri: str,
    policy: DecisionPolicy | dict[str, Any],
    challenger_uri: str | dict[str, Any] | None = None,
    challengers: Sequence[str | dict[str, Any]] | Mapping[str, str | dict[str, Any]] | None = None,
    challenger_prefix: str | None = None,
    on_no_challengers: str = "fail",
    metrics: Sequence[str] = DEFAULT_METRICS,
    ndcg_k: Sequence[int] = (5, 10),
    cluster_conn_id: str | None = None,
    cluster_spec: dict[str, Any] | None = None,
    ray_conn_id: str | None = None,
    schedule: Any = "@daily",
    on_promote: PromoteCallable | None = None,
    model_asset: Asset | None = None,
    evaluation_options: dict[str, Any] | None = None,
    runtime_env: dict[str, Any] | None = None,
    prepare_entrypoint: list[str] | str | None = None,
    job_timeout: float | None = None,
    deferrable: bool = True,
    poll_interval: float = 2.0,
    cluster: ClusterSettings | None = None,
    dag_kwargs: dict[str, Any] | None = None,
) -> DAG:
    """Build the nightly champion-vs-challenger DAG.

    :param dag_id: the DAG id.
    :param champion_uri: the production model (a ``.joblib``/``.pkl`` URI, or a model spec dict with
        ``factory``/``kwargs``).
    :param challenger_uri: one candidate model, same forms.
    :param challengers: many candidates fixed in the DAG: URIs/specs (named after the file, ``a.joblib``
        -> ``a``) or ``{name: uri or spec}``.
    :param challenger_prefix: list the candidates at run time: every ``.joblib``/``.pkl``/``.pickle``
        file under this folder or URI prefix (templated, e.g. ``"s3://registry/candidates/" + RUN_DATE``).
        Give exactly one of ``challenger_uri``, ``challengers`` and ``challenger_prefix``.
    :param on_no_challengers: a ``challenger_prefix`` with no model file at run time: ``fail`` the run
        (default) or ``skip`` it (no cluster is started either way).
    :param data_uri: evaluation data (Parquet); templated, e.g. ``"s3://logs/clicks/dt=" + RUN_DATE`` so
        each run reads its own partition (:data:`~airflow_ray_provider.templates.RUN_DATE` is defined also
        in runs without a logical date, where ``{{ ds }}`` fails to render).
    :param columns: column map: ``label``, ``group`` (query id, for NDCG and the group bootstrap),
        ``slices`` (e.g. ``["zone"]``), ``features``.
    :param artifact_uri: where the evaluation writes ``metrics.json`` and where the report goes; templated,
        e.g. ``"s3://ml/validation/" + RUN_DATE``.
    :param policy: the :class:`DecisionPolicy` (or its dict form).
    :param metrics: metric families: ``accuracy``, ``roc_auc``, ``log_loss``, ``calibration``, ``ndcg``.
    :param ndcg_k: cut-offs of NDCG.
    :param cluster_conn_id: ``kuberay`` connection for an ephemeral RayCluster (``None``: local Ray head).
    :param cluster_spec: the RayCluster spec (image, head, worker groups).
    :param ray_conn_id: run on this existing Ray cluster instead (no setup/teardown).
    :param schedule: the DAG schedule (``@daily``).
    :param on_promote: called as ``on_promote(decision, context)`` in the promote task.
    :param model_asset: the Asset the promote task updates (default ``model://<dag_id>/champion``); its
        event's ``extra`` names the new model (``model_uri``).
    :param evaluation_options: extra evaluation config keys (``bootstrap``, ``scoring``, ``threshold``, ...).
    :param runtime_env: Ray runtime environment of the jobs (e.g. ``{"pip": ["airflow-ray-provider"]}``).
    :param prepare_entrypoint: optional Ray job run on the cluster before the evaluation (e.g. data prep).
    :param job_timeout: seconds before a Ray job is stopped and the task fails.
    :param deferrable: wait for the Ray job in the triggerer instead of a worker slot.
    :param poll_interval: seconds between Ray job status polls.
    :param cluster: full :class:`ClusterSettings` (overrides the three cluster arguments above); its
        ``mode`` runs the Ray jobs as an ephemeral cluster, RayJobs, on a standing cluster, one task each or
        on a pool.
    :param dag_kwargs: extra :class:`~airflow.sdk.DAG` arguments (``start_date``, ``default_args``, ...).
    :raises RayInvalidInputError: on a policy that names metrics the evaluation does not compute.
    """
    from airflow.sdk import DAG

    from airflow_ray_provider.templates.champion_challenger import listing

    models = listing.fixed_models(
        champion_uri,
        challenger_uri=challenger_uri,
        challengers=challengers,
        challenger_prefix=challenger_prefix,
        on_no_challengers=on_no_challengers,
    )
    config = evaluation_config(
        models=models if models is not None else listing.MODELS_PLACEHOLDER,
        data_uri=data_uri,
        columns=columns,
        artifact_uri=artifact_uri,
        metrics=metrics,
        ndcg_k=ndcg_k,
        options=evaluation_options,
    )
    check_evaluation_config(config, champion_uri)  # the workload's own rules, before the policy's
    checked = _check_policy(policy, metrics, ndcg_k)
    settings = cluster or ClusterSettings(conn_id=cluster_conn_id, spec=cluster_spec, ray_conn_id=ray_conn_id)
    listed = (
        None
        if challenger_prefix is None
        else listing.ListSpec(champion=champion_uri, prefix=challenger_prefix, on_empty=on_no_challengers)
    )
    arguments = dag_arguments(["ray", "model-validation"], dag_kwargs)
    with DAG(dag_id=dag_id, schedule=schedule, **arguments) as dag:
        _wire(
            dag_id=dag_id,
            settings=settings,
            config=config,
            policy=checked,
            on_promote=on_promote,
            model_asset=model_asset or default_model_asset(dag_id),
            runtime_env=runtime_env,
            prepare_entrypoint=prepare_entrypoint,
            job_timeout=job_timeout,
            deferrable=deferrable,
            poll_interval=poll_interval,
            listed=listed,
        )
    return dag


def _wire(
    *,
    dag_id: str,
    settings: ClusterSettings,
    config: dict[str, Any],
    policy: DecisionPolicy,
    on_promote: PromoteCallable | None,
    model_asset: Asset,
    runtime_env: dict[str, Any] | None,
    prepare_entrypoint: list[str] | str | None,
    job_timeout: float | None,
    deferrable: bool,
    poll_interval: float,
    listed: ListSpec | None = None,
) -> None:
    from airflow_ray_provider.templates.champion_challenger import listing
    from airflow_ray_provider.templates.champion_challenger import tasks as steps
    from airflow_ray_provider.templates.collect import CollectRayMetricsOperator

    setup = setup_task(settings)  # create (ephemeral), attach (standing by name) or none
    entrypoint = workload_entrypoint(settings.interpreter, EVALUATE_MODULE, config)
    lister = None
    if listed is not None:
        lister = listing.list_challengers(listed.to_dict())
        entrypoint = listing.with_listed_models(entrypoint)
    job: dict[str, Any] = {
        "deferrable": deferrable, "poll_interval": poll_interval, "job_timeout": job_timeout,
        "runtime_env": runtime_env,
    }  # fmt: skip
    evaluate = ray_job_task(
        settings,
        setup,
        task_id="evaluate",
        entrypoint=entrypoint,
        metadata={"dag_id": dag_id, "step": "evaluate"},
        **job,
    )
    first = evaluate
    if prepare_entrypoint:
        first = ray_job_task(settings, setup, task_id="prepare", entrypoint=prepare_entrypoint, **job)
        first >> evaluate
    collect = CollectRayMetricsOperator(
        task_id="collect_metrics", artifact_uri=config["output_uri"], slice_metrics=policy.metrics
    )
    decision = steps.decide(collect.output, policy.to_dict())
    report = steps.report(collect.output, decision, policy.to_dict(), dag_id)
    branch = steps.choose(decision)
    promote = steps.make_promote(model_asset, on_promote)(decision, report)
    keep = steps.keep_champion(decision, report)
    evaluate >> collect
    report >> branch >> [promote, keep]
    if setup is not None:
        setup >> first
    if lister is not None:  # listed before any cluster starts: an empty prefix costs nothing
        lister >> (setup if setup is not None else first)
    teardown = teardown_task(setup, settings)
    if teardown is not None:
        [promote, keep] >> teardown
    log.debug("built %s (promote outcome id %s)", dag_id, PROMOTE)

"""Per-zone training: one model per zone, thousands of zones, in one Ray job (or one machine's processes).

Usage::

    python -m airflow_ray_provider.workloads.zone_training --config FILE | --config-json TEXT
        [--only-failed MANIFEST_URI]

The config keys are described in :mod:`airflow_ray_provider.workloads.zone_training.config`. Everything that
can be checked is checked before Ray starts (config, trainer, dataset columns, nulls, emptiness, the
``--only-failed`` manifest). Then the engine is chosen (``engine: auto | ray | local``, :mod:`~.engine`:
Ray tasks, or worker processes on this machine for a standalone run) and zones are batched adaptively
into tasks (:mod:`~.batching`), each task trains its zones with the math libraries capped to
``num_cpus`` threads and saves its models (one bundle per task or one file per zone,
:mod:`~airflow_ray_provider.workloads.zone_training.bundles`); the driver writes
``manifest.parquet``, ``summary.json`` and ``_SUCCESS``
(:mod:`~airflow_ray_provider.workloads.zone_training.manifest`).

Exit status (:class:`~airflow_ray_provider.workloads.common.cli.ExitCode`, the same for both workloads):
0 success; 1 failed zones above ``max_failed_fraction`` (the artifact is still written, so
``--only-failed`` can retrain them); 2 bad config, data, manifest or an ``output_uri`` that cannot be
written (probed first: nothing was trained).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.cli import ExitCode, build_parser, config_from_argv, exit_code_for
from airflow_ray_provider.workloads.common.errors import ArtifactError, WorkloadError
from airflow_ray_provider.workloads.common.object_store import check_object_stores
from airflow_ray_provider.workloads.common.ray_session import (
    SessionMode,
    check_ray_address,
    plan_session,
    ray_session,
)
from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig, parse_config
from airflow_ray_provider.workloads.zone_training.dataset import DatasetPlan, inspect_dataset
from airflow_ray_provider.workloads.zone_training.engine import (
    EngineChoice,
    choose_engine,
    default_local_max_rows,
    memory_bytes,
)
from airflow_ray_provider.workloads.zone_training.manifest import (
    MODELS_DIR,
    build_summary,
    failed_zones,
    manifest_row,
    merge,
    read_manifest,
    write_artifact,
)
from airflow_ray_provider.workloads.zone_training.trainers import check_trainer

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.zone_training.worker import WorkerContext

log = logging.getLogger(__name__)


def run_zone_training(cfg: ZoneTrainingConfig, *, only_failed: str | None = None) -> dict[str, Any]:
    """Train every zone (or only the failed zones of a previous manifest); return the summary.

    Ray is found by :func:`~airflow_ray_provider.workloads.common.ray_session.ray_session`: the
    caller's when already initialised, ``cfg.ray_address``, the Ray job's cluster, or a private local
    Ray standalone. It is not touched at all when there is nothing to train.

    :raises ConfigError: bad trainer or ``--only-failed`` manifest.
    :raises DataError: the dataset does not fit the config.
    :raises ArtifactError: the output could not be written.
    """
    started_at, t0 = _now(), time.monotonic()
    check_object_stores(
        {"data_uri": cfg.data_uri, "output_uri": cfg.output_uri, "--only-failed": only_failed}
    )
    try:
        artifacts.probe_writable(cfg.output_uri)  # leaves nothing behind
    except ArtifactError as exc:
        raise ArtifactError(f"output_uri: {exc}") from exc
    if cfg.engine != "ray" and _standalone(cfg):  # the local engine is likely: its imports overlap the checks
        from airflow_ray_provider.workloads.zone_training.process_pool import warm_up

        warm_up()
    plan = inspect_dataset(cfg, numeric_features=check_trainer(cfg.trainer, cfg.trainer_kwargs))
    previous, todo, attempts, gone = _select_zones(cfg, plan, only_failed)
    log.info(
        "application %s: %d zones to train (%d rows), trainer %s, %g CPU(s) per zone, data %s",
        cfg.application,
        len(todo),
        sum(plan.zone_rows[z] for z in todo),
        cfg.trainer,
        cfg.num_cpus,
        "partitioned by zone" if plan.partitioned_by_zone else f"staged in {len(plan.chunks)} chunk(s)",
    )
    if todo and cfg.engine != "local":  # a Ray address nothing answers at fails before any output changes
        check_ray_address(cfg.ray_address)
    artifacts.clear_completion(cfg.output_uri)
    timings = {"validate": time.monotonic() - t0}
    tasks: dict[str, Any] = {}
    new_rows, ray_mode, engine = _train_zones(cfg, plan, todo, attempts, timings, tasks)
    if tasks:  # the CPU-seconds the training tasks held, by their own clock (the usage record's unit)
        tasks.update(
            num_cpus=cfg.num_cpus,
            cpu_s=round(float(tasks.get("busy_s") or 0.0) * cfg.num_cpus, 3),
            function=TRAINING_TASK,  # its name in Ray's task list (the usage record's by-function figures)
        )
    rows = merge(previous, new_rows + gone) if only_failed else new_rows
    run = {
        "started_at": started_at,
        "finished_at": _now(),
        "ray_version": _ray_version(),
        "engine": engine.as_dict() if engine else None,
        "ray_session": ray_mode,
        "run_info": cfg.run_info,
        "trainer": cfg.trainer,
        "artifacts": cfg.artifacts,
        "data_uri": cfg.data_uri,
        "only_failed": only_failed,
        "timings_s": timings,
        "tasks": tasks,
        # CPU time of the trainer calls of this run's zones (time.process_time: fits only, no I/O)
        "trainer_cpu_s": round(sum(float(r.get("cpu_s") or 0.0) for r in new_rows), 3),
    }
    summary = build_summary(
        application=cfg.application,
        rows=rows,
        max_failed_fraction=cfg.max_failed_fraction,
        output_uri=cfg.output_uri,
        run=run,
        duration_s=time.monotonic() - t0,
    )
    write_artifact(cfg.output_uri, cfg.application, rows, summary)
    return summary


def _select_zones(
    cfg: ZoneTrainingConfig, plan: DatasetPlan, only_failed: str | None
) -> tuple[list[dict[str, Any]], list[str], dict[str, int], list[dict[str, Any]]]:
    """(previous manifest rows, zones to train, manifest attempt per zone, rows for vanished zones)."""
    if only_failed is None:
        return [], list(plan.zone_rows), {}, []
    previous = read_manifest(only_failed)
    failed = failed_zones(previous, cfg.application, only_failed)
    failed_set = set(failed)
    attempts = {r["zone"]: int(r["attempt"] or 0) + 1 for r in previous if r["zone"] in failed_set}
    todo = [z for z in failed if z in plan.zone_rows]
    gone = [
        manifest_row(
            z, "failed", error=f"zone {z!r} is no longer in {cfg.data_uri!r}", rows=0, attempt=attempts[z]
        )
        for z in failed
        if z not in plan.zone_rows
    ]
    log.info("--only-failed %s: %d failed zone(s) to retrain", only_failed, len(todo))
    return previous, todo, attempts, gone


def _train_zones(
    cfg: ZoneTrainingConfig,
    plan: DatasetPlan,
    todo: list[str],
    attempts: dict[str, int],
    timings: dict[str, float],
    tasks: dict[str, Any],
) -> tuple[list[dict[str, Any]], str | None, EngineChoice | None]:
    """Train ``todo`` with the engine :func:`~.engine.choose_engine` picks (nothing when ``todo`` is empty).

    :returns: the result rows, how Ray was found (``"none"`` for the local engine, ``None`` when there
        was nothing to train) and the engine choice.
    """
    from airflow_ray_provider.workloads.zone_training import scheduler
    from airflow_ray_provider.workloads.zone_training.capacity import check_local, wait_for_capacity

    if not todo:
        return [], None, None
    standalone = _standalone(cfg)
    rows = sum(plan.zone_rows[z] for z in todo)
    limit = cfg.local_max_rows
    if limit is None:
        limit = default_local_max_rows(1 + len(plan.feature_columns), memory_bytes())
    choice = choose_engine(
        cfg.engine,
        standalone=standalone,
        rows=rows,
        staged=not plan.partitioned_by_zone,
        local_max_rows=limit,
    )
    log.info("engine %s: %s", choice.engine, choice.reason)
    if standalone or choice.engine == "local":
        check_local(cfg.num_cpus)  # before the private Ray or the worker processes start
    if choice.engine == "local":
        from airflow_ray_provider.workloads.zone_training.local_engine import train_locally

        ctx = worker_context(cfg, plan)
        new_rows, phases, figures = train_locally(
            cfg, plan, ctx, todo, attempts, grace_s=scheduler.BACKSTOP_GRACE_S
        )
        timings.update(phases)
        tasks.update(figures)
        return new_rows, "none", choice
    connect_from = time.monotonic()
    with ray_session(cfg.ray_address) as session:
        timings["connect"] = time.monotonic() - connect_from
        wait_for_capacity(cfg.num_cpus, cfg.capacity_wait_s)  # the nodes as Ray counts them
        new_rows = _train(cfg, plan, todo, attempts, timings, tasks)
    return new_rows, session.mode.value, choice


#: The Ray function name of the training tasks (:mod:`.ray_tasks`).
TRAINING_TASK = "_batch_task"


def _train(
    cfg: ZoneTrainingConfig,
    plan: DatasetPlan,
    todo: list[str],
    attempts: dict[str, int],
    timings: dict[str, float],
    tasks: dict[str, Any],
) -> list[dict[str, Any]]:
    """The Ray engine: stage the data when needed and fan the zones out (on the Ray connected to).

    Records the phases' seconds in ``timings`` and, in ``tasks``, the fan-out's task figures
    (:meth:`~.scheduler.ZoneScheduler.task_figures`).
    """
    import ray

    from airflow_ray_provider.workloads.zone_training import scheduler as zone_scheduler
    from airflow_ray_provider.workloads.zone_training.batching import AdaptiveBatcher, ZoneItem
    from airflow_ray_provider.workloads.zone_training.ray_tasks import RayTasks
    from airflow_ray_provider.workloads.zone_training.scheduler import ZoneScheduler, ZoneSources
    from airflow_ray_provider.workloads.zone_training.staging import stage_dataset

    ctx = worker_context(cfg, plan)
    started = time.monotonic()
    staged = None if plan.partitioned_by_zone else stage_dataset(plan)
    staged_at = time.monotonic()
    slots = max(1, int(ray.cluster_resources().get("CPU", 1) // cfg.num_cpus))
    batcher = AdaptiveBatcher([ZoneItem(z, plan.zone_rows[z]) for z in todo], slots, cfg.batching)
    sources = ZoneSources(plan, staged, attempts)
    runner = RayTasks(cfg, ctx, zone_scheduler.BACKSTOP_GRACE_S)
    scheduler = ZoneScheduler(cfg=cfg, runner=runner, sources=sources, batcher=batcher, slots=slots)
    rows = scheduler.run()
    tasks.update(scheduler.task_figures())
    timings.update(stage=staged_at - started, fan_out=time.monotonic() - staged_at)
    return rows


def _standalone(cfg: ZoneTrainingConfig) -> bool:
    """Whether no Ray runs for this run (Ray would mean a private one: the session's rule 5)."""
    ray_module = sys.modules.get("ray")  # imported by a caller that may have initialised it
    initialized = bool(ray_module is not None and ray_module.is_initialized())
    return (
        plan_session(cfg.ray_address, environ=os.environ, initialized=initialized).mode is SessionMode.LOCAL
    )


def worker_context(cfg: ZoneTrainingConfig, plan: DatasetPlan) -> WorkerContext:
    """What every training task needs besides its zones: the dataset's columns and the config's settings."""
    from airflow_ray_provider.workloads.zone_training.worker import WorkerContext

    return WorkerContext(
        fs=plan.fs,
        zone_column=plan.zone_column,
        label_column=plan.label_column,
        feature_columns=plan.feature_columns,
        file_columns=plan.file_columns,
        models_uri=artifacts.join(cfg.output_uri, MODELS_DIR),
        trainer=cfg.trainer,
        trainer_kwargs=cfg.trainer_kwargs,
        threads=cfg.threads,
        zone_timeout_s=cfg.zone_timeout_s,
        zone_retries=cfg.zone_retries,
        partitioned=plan.partitioned_by_zone,
        artifacts=cfg.artifacts,
        run_token=uuid.uuid4().hex[:12],
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _ray_version() -> str:
    """Ray's version, without importing Ray (the local engine never does)."""
    from importlib.metadata import version

    return version("ray")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = build_parser("zone_training", "Train one model per zone in one Ray job.")
    parser.add_argument("--only-failed", metavar="MANIFEST", help="retrain only the failed zones of MANIFEST")
    try:
        args, raw = config_from_argv(parser, argv)
        cfg = parse_config(raw)
        summary = run_zone_training(cfg, only_failed=args.only_failed)
    except WorkloadError as exc:
        print(f"zone_training: error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    log.info(
        "done: %d zones, %d succeeded, %d failed (%.1f%%) in %.1fs; summary %s",
        summary["zones_total"],
        summary["succeeded"],
        summary["failed"],
        100 * summary["failed_fraction"],
        summary["duration_s"],
        artifacts.join(cfg.output_uri, "summary.json"),
    )
    if summary["threshold_exceeded"]:
        print(
            f"zone_training: error: {summary['failed']} of {summary['zones_total']} zones failed "
            f"({summary['failed_fraction']:.1%}), above max_failed_fraction {cfg.max_failed_fraction:.1%}; "
            f"first failures: {summary['failed_zones'][:5]}. Fix them and rerun with --only-failed "
            f"{summary['manifest']}",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    return ExitCode.OK

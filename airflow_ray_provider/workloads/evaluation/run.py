"""Champion-vs-challenger evaluation on Ray: one streaming pass, exact metrics, paired bootstrap CIs.

Run inside a Ray job, or standalone on a private local Ray (the rule is
:mod:`~airflow_ray_provider.workloads.common.ray_session`'s)::

    python -m airflow_ray_provider.workloads.evaluate --config eval.yaml
    python -m airflow_ray_provider.workloads.evaluate --config-json '{"data_uri": ..., ...}'

Pipeline: Parquet (Ray Data ``read_parquet``, streaming) -> an actor pool where each actor loads every
model once and reduces each block to exact integer partials -> the driver merges the partials
(:mod:`~.aggregate`) -> ``metrics.json`` + ``slices.parquet`` (+ predictions)
written atomically. Node loss: reads are retried and actors restarted without limit, and the merge is
exact and order-independent, so a run that lost a node yields the same metrics as one that did not.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import pickle
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import WorkloadError, workload_error_from
from airflow_ray_provider.workloads.common.progress import Progress
from airflow_ray_provider.workloads.common.ray_session import ray_session

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.preflight import Preflight

log = logging.getLogger(__name__)


def read_stage_options(cfg: EvalConfig) -> dict[str, Any]:
    """``map_batches`` arguments of the read stage: named parameters only.

    Anything else lands in Ray's deprecated ``**ray_remote_args`` (a ``RayDeprecationWarning`` from this
    module). A read lost with its node is redone: Ray Data's map tasks retry without limit by default.
    """
    return {"batch_size": 1, "batch_format": "numpy", "num_cpus": cfg.scoring.read_num_cpus}


def build_dataset(cfg: EvalConfig, pre: Preflight, predictions_uri: str | None) -> ray.data.Dataset:
    """The Ray Data pipeline: read units (contiguous row groups) -> scoring/aggregating actor pool.

    Errors raised in the actors keep their class (``raise_original_map_exception``), so a
    :class:`~airflow_ray_provider.workloads.common.errors.DataError` found deep in the data reaches the
    driver as itself, not as Ray Data's generic ``UserCodeException``.
    """
    import functools

    import ray.data

    from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator
    from airflow_ray_provider.workloads.evaluation.source import read_units

    items = [{"unit": json.dumps(unit)} for unit in pre.units]
    read = functools.partial(read_units, data_uri=cfg.data_uri, columns=pre.read_columns)
    ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        read, **read_stage_options(cfg)
    )
    gpu = cfg.scoring.num_gpus > 0
    conc = cfg.scoring.concurrency
    low, high = conc if isinstance(conc, tuple) else (conc, conc)
    # map_batches refuses batch_size=None with GPUs; the actor micro-batches itself (scoring.batch_size).
    mapper = ds.map_batches_internal if gpu else ds.map_batches
    out = mapper(
        BlockEvaluator,
        fn_constructor_kwargs={
            "cfg": cfg,
            "features": pre.features,
            "has_proba": pre.has_proba,
            "predictions_uri": predictions_uri,
        },
        batch_size=None,  # one call per block: a block's rows arrive in file order (groups stay together)
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(min_size=low, max_size=high),
        num_cpus=cfg.scoring.num_cpus,
        num_gpus=cfg.scoring.num_gpus if gpu else None,
        # Ray Data restarts dead actors and retries their tasks without limit by default
        # (max_restarts=-1, max_task_retries=-1): what a lost spot node needs.
    )
    out.context.raise_original_map_exception = True
    if cfg.scoring.object_store_mb:  # bound the blocks in flight: memory stays flat as data grows
        limit = cfg.scoring.object_store_mb * 1024 * 1024
        out.context.execution_options.resource_limits = ray.data.ExecutionResources(object_store_memory=limit)
    return out


def _stream(cfg: EvalConfig, pre: Preflight, predictions_uri: str | None) -> tuple[Accumulator, Progress]:
    """Run the pipeline and merge every block's partial as it arrives.

    :raises WorkloadError: the one a scoring actor raised (bad labels deep in the data, a model that
        fails on a block), with its own class and message.
    """
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator

    acc = Accumulator(cfg, pre.has_proba)
    ds = build_dataset(cfg, pre, predictions_uri)
    progress = Progress(pre.rows, "rows", cfg.progress_interval_s, logger=log)
    with progress.reporting():
        try:
            for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                table = cast("pa.Table", batch)  # batch_format="pyarrow": Ray's stubs type it as any format
                for blob in table.column("partial").to_pylist():
                    partial = pickle.loads(blob)
                    acc.add(partial)
                    progress.add(int(partial["rows"]))
        except Exception as exc:
            inner = workload_error_from(exc)
            if inner is not None:
                raise inner from exc
            raise
    return acc, progress


def stream_timings(progress: Progress, span: tuple[float, float]) -> dict[str, float | None]:
    """Pipeline timings: start-up, whole stream, and two throughputs.

    ``pipeline_rows_per_s`` counts from the start of the pipeline (actor start-up included);
    ``scoring_rows_per_s`` only over the actors' scoring span (first block started to last block
    done, wall clock from the actors). Reads that ran while the actors started are outside it.

    :param progress: the stream's row counter (monotonic clock).
    :param span: the actors' scoring span (wall clock).
    """
    if progress.first_at is None or progress.last_at is None or not span[1] > span[0]:
        return {"startup_s": None, "stream_s": None, "pipeline_rows_per_s": None, "scoring_rows_per_s": None}
    wall_offset = time.time() - time.monotonic()
    stream = progress.last_at - progress.started
    return {
        "startup_s": round(span[0] - wall_offset - progress.started, 3),
        "stream_s": round(stream, 3),
        "pipeline_rows_per_s": round(progress.done / stream, 1),
        "scoring_rows_per_s": round(progress.done / (span[1] - span[0]), 1),
    }


def run_evaluation(config: dict[str, Any] | EvalConfig, *, ray_address: str | None = None) -> dict[str, Any]:
    """Run the whole evaluation and write the artifact; returns the ``metrics.json`` document.

    :param config: a config mapping (validated here) or an :class:`EvalConfig`.
    :param ray_address: overrides ``config.ray_address`` (tests pass a ``Cluster`` address).
    :raises WorkloadError: on bad input (before heavy work) or failed work; no artifact is written then.
    """
    import ray

    from airflow_ray_provider.workloads.evaluation import artifact as eval_artifact
    from airflow_ray_provider.workloads.evaluation import bootstrap, metrics
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.preflight import run_preflight

    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    cfg = config if isinstance(config, EvalConfig) else EvalConfig.from_dict(config)
    pre = run_preflight(cfg)
    t_pre = time.monotonic()
    staging = eval_artifact.staging_uri(cfg.output_uri) if cfg.write_predictions else None
    try:
        with ray_session(ray_address or cfg.ray_address) as session:
            t_ray = time.monotonic()
            acc, progress = _stream(cfg, pre, artifacts.join(staging, "predictions") if staging else None)
        t_merge = time.monotonic()
        result = acc.finalize()
        directions = metrics.metric_directions(cfg.metrics, cfg.ndcg_k)
        result.deltas = bootstrap.paired_deltas(cfg, acc.buckets, acc.hist, result.overall, list(directions))
        finished = dt.datetime.now(dt.timezone.utc)
        run = {
            "started_at": started.isoformat(),
            "finished_at": finished.isoformat(),
            "duration_s": round(time.monotonic() - t0, 3),
            "timings": {
                "preflight_s": round(t_pre - t0, 3),
                "ray_init_s": round(t_ray - t_pre, 3),
                **stream_timings(progress, acc.span),
                "finalize_s": round(time.monotonic() - t_merge, 3),
            },
            "ray_version": ray.__version__,
            "ray_session": session.mode.value,
            "run_info": cfg.run_info,
        }
        doc = eval_artifact.build_document(cfg, result, models=pre.models, directions=directions, run=run)
        table = eval_artifact.slices_table(result, list(directions))
        predictions = artifacts.join(staging, "predictions") if staging else None
        eval_artifact.write_artifact(cfg.output_uri, doc, table, predictions)
    finally:
        if staging:
            eval_artifact.discard(staging)
    log.info(
        "wrote %s (%d rows in %.1f s)",
        artifacts.join(cfg.output_uri, "metrics.json"),
        result.rows,
        time.monotonic() - t0,
    )
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; exit 0 on success, 2 on bad input/config, 1 on other failures."""
    from airflow_ray_provider.workloads.common.cli import build_parser, config_from_argv
    from airflow_ray_provider.workloads.common.errors import ConfigError, DataError

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout
    )
    parser = build_parser("python -m airflow_ray_provider.workloads.evaluate", __doc__.splitlines()[0])
    try:
        _, raw = config_from_argv(parser, argv)
        doc = run_evaluation(raw)
    except (ConfigError, DataError) as exc:
        print(f"evaluation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except WorkloadError as exc:
        print(f"evaluation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    summary = {
        m: {k: doc["metrics"][m].get(k) for k in ("rows", "roc_auc", "log_loss")} for m in doc["metrics"]
    }
    log.info("metrics: %s", summary)
    return 0

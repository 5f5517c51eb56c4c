"""Champion-vs-challenger evaluation on Ray: one streaming pass, exact metrics, paired bootstrap CIs.

Run inside a Ray job, or standalone on a private local Ray (the rule is
:mod:`~airflow_ray_provider.workloads.common.ray_session`'s)::

    python -m airflow_ray_provider.workloads.evaluate --config eval.yaml
    python -m airflow_ray_provider.workloads.evaluate --config-json '{"data_uri": ..., ...}'

Pipeline: preflight (metadata, a sample, each model loaded once; on a thread while a private Ray starts; a
running cluster is connected to once the driver holds its first block) -> read units (contiguous Parquet
row groups, each read once) -> each block reduced to exact integer partials by every model group's actor
pool, the models shipped through the object store (:mod:`~.pipeline`), or in this process for inputs too
small for Ray to pay back (``engine: auto | ray | local``, :mod:`~.engine`) -> the driver merges the
partials (:mod:`~.aggregate`) -> ``metrics.json`` (with the run's phase timings, :mod:`~.phases`, the
bytes read against the dataset's size and the model groups, :mod:`~.packing`) + ``slices.parquet`` (+
predictions) written atomically, while Ray shuts down on a thread. Node loss: reads are retried and actors
restarted without limit, and the merge is exact and order-independent, so a run that lost a node yields
the same metrics as one that did not.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import logging
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import WorkloadError
from airflow_ray_provider.workloads.common.object_store import check_object_stores
from airflow_ray_provider.workloads.evaluation.phases import PhaseClock

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.preflight import Preflight

log = logging.getLogger(__name__)


def run_evaluation(config: dict[str, Any] | EvalConfig, *, ray_address: str | None = None) -> dict[str, Any]:
    """Run the whole evaluation and write the artifact; returns the ``metrics.json`` document.

    :param config: a config mapping (validated here) or an :class:`EvalConfig`.
    :param ray_address: overrides ``config.ray_address`` (tests pass a ``Cluster`` address).
    :raises WorkloadError: on bad input (before heavy work) or failed work; no artifact is written then.
    """
    from airflow_ray_provider.workloads.common.ray_session import RayCloser, check_ray_address
    from airflow_ray_provider.workloads.evaluation import artifact as eval_artifact
    from airflow_ray_provider.workloads.evaluation import bootstrap
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.engine import run_engine
    from airflow_ray_provider.workloads.evaluation.names import metric_directions
    from airflow_ray_provider.workloads.evaluation.preflight import PreflightRun

    started = dt.datetime.now(dt.timezone.utc)
    clock = PhaseClock()
    cfg = config if isinstance(config, EvalConfig) else EvalConfig.from_dict(config)
    check_object_stores(  # before any work: an endpoint, bucket or key that cannot work, by its field
        {
            "data_uri": cfg.data_uri,
            **{f"models.{m.name}.uri": m.uri for m in cfg.models},
            "output_uri": cfg.output_uri,
        }
    )
    check_ray_address(ray_address or cfg.ray_address)  # before any work: a Ray nothing answers at
    staging = eval_artifact.staging_uri(cfg.output_uri) if cfg.write_predictions else None
    checks = PreflightRun(cfg, clock)  # on its thread, while a private Ray starts
    try:
        with RayCloser() as closer:  # Ray shuts down while the metrics and the artifact are made
            predictions = artifacts.join(staging, "predictions") if staging else None
            scored = run_engine(cfg, checks, ray_address or cfg.ray_address, predictions, clock, closer)
            pre = checks.result()
            acc = scored.acc
            result = acc.finalize()
            directions = metric_directions(cfg.metrics, cfg.ndcg_k)
            result.deltas = bootstrap.paired_deltas(
                cfg, acc.buckets, acc.hist, result.overall, list(directions), directions=directions
            )
            clock.mark("finalized")
            finished = dt.datetime.now(dt.timezone.utc)
            run = {
                "started_at": started.isoformat(),
                "finished_at": finished.isoformat(),
                "duration_s": round(time.monotonic() - clock.started, 3),
                "timings": clock.timings(result.rows),
                "io": read_figures(pre, scored.bytes_read),
                "packing": [g.as_dict() for g in scored.groups],
                "engine": scored.choice.as_dict(),
                "ray_version": importlib.metadata.version("ray"),
                "ray_session": scored.session_mode,
                "run_info": cfg.run_info,
            }
            doc = eval_artifact.build_document(cfg, result, models=pre.models, directions=directions, run=run)
            table = eval_artifact.slices_table(result, list(directions))
            eval_artifact.write_artifact(cfg.output_uri, doc, table, predictions)
    finally:
        checks.close()
        if staging:
            eval_artifact.discard(staging)
    log.info(
        "wrote %s (%d rows in %.1f s)",
        artifacts.join(cfg.output_uri, "metrics.json"),
        result.rows,
        time.monotonic() - clock.started,
    )
    return doc


def read_figures(pre: Preflight, bytes_read: int) -> dict[str, Any]:
    """``run.io``: the stored bytes the scoring pass read, against one pass and the dataset's size.

    ``passes`` is 1.0 when every block was read exactly once (whatever the number of model groups).
    """
    return {
        "bytes_read": bytes_read,
        "pass_bytes": pre.pass_bytes,
        "dataset_bytes": pre.dataset_bytes,
        "passes": round(bytes_read / pre.pass_bytes, 6) if pre.pass_bytes else None,
        "read_fraction": round(bytes_read / pre.dataset_bytes, 6) if pre.dataset_bytes else None,
        "blocks": len(pre.units),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; the exit status of :class:`~airflow_ray_provider.workloads.common.cli.ExitCode`."""
    from airflow_ray_provider.workloads.common.cli import (
        ExitCode,
        build_parser,
        config_from_argv,
        exit_code_for,
    )

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout
    )
    parser = build_parser("python -m airflow_ray_provider.workloads.evaluate", __doc__.splitlines()[0])
    try:
        _, raw = config_from_argv(parser, argv)
        doc = run_evaluation(raw)
    except WorkloadError as exc:
        print(f"evaluation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    summary = {
        m: {k: doc["metrics"][m].get(k) for k in ("rows", "roc_auc", "log_loss")} for m in doc["metrics"]
    }
    log.info("metrics: %s", summary)
    return ExitCode.OK

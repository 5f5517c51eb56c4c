"""The Ray engine: Parquet read units -> a scoring actor pool (Ray Data) -> partials merged on the driver.

Errors raised in the actors keep their class (``raise_original_map_exception``), so a
:class:`~airflow_ray_provider.workloads.common.errors.DataError` found deep in the data reaches the
driver as itself, not as Ray Data's generic ``UserCodeException``.
"""

from __future__ import annotations

import json
import logging
import pickle
import warnings
from typing import TYPE_CHECKING, Any, cast

from airflow_ray_provider.workloads.common.errors import workload_error_from
from airflow_ray_provider.workloads.common.progress import Progress

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.phases import PhaseClock
    from airflow_ray_provider.workloads.evaluation.preflight import Preflight

log = logging.getLogger(__name__)


def read_stage_options(cfg: EvalConfig) -> dict[str, Any]:
    """``map_batches`` arguments of the read stage: named parameters only.

    Anything else lands in Ray's deprecated ``**ray_remote_args`` (a ``RayDeprecationWarning`` from this
    module). A read lost with its node is redone: Ray Data's map tasks retry without limit by default.
    """
    return {"batch_size": 1, "batch_format": "numpy", "num_cpus": cfg.scoring.read_num_cpus}


def build_dataset(
    cfg: EvalConfig, pre: Preflight, predictions_uri: str | None, *, restart_actors: bool = True
) -> ray.data.Dataset:
    """The Ray Data pipeline: read units (contiguous row groups) -> scoring/aggregating actor pool.

    :param cfg: the validated config; :param pre: what preflight found (units, features, models);
    :param predictions_uri: where actors write prediction files (None: they do not).
    :param restart_actors: restart a dead scoring actor (what a lost node needs). ``False`` on a
        private one-node Ray (standalone): there is no other node to restart on, and a restartable
        actor makes Ray's core worker print an error-level note about its constructor arguments in the
        object store (ray-project/ray#53727) that a user cannot act on.
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
    # More actors than blocks would idle (and Ray Data warns that the pool cannot fill).
    low, high = min(low, len(items)), min(high, len(items))
    # map_batches refuses batch_size=None with GPUs; the actor micro-batches itself (scoring.batch_size).
    mapper = ds.map_batches_internal if gpu else ds.map_batches
    with warnings.catch_warnings():
        # The one way to set an actor pool's max_restarts, deprecated (Ray 2.64 drops it; this
        # argument is passed only on a private one-node Ray).
        warnings.filterwarnings("ignore", message="`ray_remote_args_fn` is deprecated")
        out = mapper(
            BlockEvaluator,
            fn_constructor_kwargs={
                "cfg": cfg,
                "features": pre.features,
                "has_proba": pre.has_proba,
                "predictions_uri": predictions_uri,
                "models": ship_models(cfg, pre),
            },
            batch_size=None,  # one call per block: a block's rows arrive in file order (groups stay together)
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(min_size=low, max_size=high),
            num_cpus=cfg.scoring.num_cpus,
            num_gpus=cfg.scoring.num_gpus if gpu else None,
            # Ray Data restarts dead actors and retries their tasks without limit by default
            # (max_restarts=-1, max_task_retries=-1): what a lost spot node needs.
            ray_remote_args_fn=None if restart_actors else _no_actor_restarts,
        )
    out.context.raise_original_map_exception = True
    if cfg.scoring.object_store_mb:  # bound the blocks in flight: memory stays flat as data grows
        limit = cfg.scoring.object_store_mb * 1024 * 1024
        out.context.execution_options.resource_limits = ray.data.ExecutionResources(object_store_memory=limit)
    return out


def _no_actor_restarts() -> dict[str, Any]:
    """Remote arguments of a scoring actor on a private one-node Ray (see :func:`build_dataset`)."""
    return {"max_restarts": 0, "max_task_retries": 0}


def ship_models(cfg: EvalConfig, pre: Preflight) -> dict[str, Any]:
    """Object refs to the models preflight loaded: put once, fetched by every actor (no reload per actor).

    Factory models stay out when the actors hold GPUs (the actor builds them on its own device), and so
    does a model that cannot be pickled (the actor loads it from its spec).
    """
    import ray

    refs: dict[str, Any] = {}
    for name, loaded in pre.loaded.items():
        if loaded.sha256 is None and cfg.scoring.num_gpus > 0:
            continue
        try:
            refs[name] = ray.put(loaded)
        except Exception as exc:  # any pickling failure: the actor loads the model itself
            log.info("model %r is loaded in each actor (%s: %s)", name, type(exc).__name__, exc)
    return refs


def stream_on_ray(
    cfg: EvalConfig,
    pre: Preflight,
    predictions_uri: str | None,
    clock: PhaseClock,
    *,
    restart_actors: bool = True,
) -> Accumulator:
    """Run the pipeline and merge every block's partial as it arrives.

    :param clock: receives the ``pipeline``, ``first_scoring``, ``first_row`` and ``last_row`` marks.
    :param restart_actors: see :func:`build_dataset`.
    :raises WorkloadError: the one a scoring actor raised (bad labels deep in the data, a model that
        fails on a block), with its own class and message.
    """
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator

    acc = Accumulator(cfg, pre.has_proba)
    clock.mark("pipeline")
    ds = build_dataset(cfg, pre, predictions_uri, restart_actors=restart_actors)
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
    _mark_stream(clock, progress, acc)
    return acc


def _mark_stream(clock: PhaseClock, progress: Progress, acc: Accumulator) -> None:
    """Copy the stream's first/last row times and the actors' first scoring start onto ``clock``."""
    if progress.first_at is not None and progress.last_at is not None:
        clock.mark("first_row", progress.first_at)
        clock.mark("last_row", progress.last_at)
    if acc.span[0] != float("inf"):
        clock.mark("first_scoring", clock.from_wall(acc.span[0]))

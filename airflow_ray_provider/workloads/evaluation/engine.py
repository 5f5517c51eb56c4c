"""Which engine scores the data, and the in-process one.

``engine: auto`` (the default) picks, and logs why:

* **ray** on a multi-node cluster (always), and on one node with more than :data:`MAX_LOCAL_CPUS` CPUs
  for inputs above the break-even row count;
* **local** (in this process: the same per-block code and exact merge, so bit-identical metrics) on one
  node with at most :data:`MAX_LOCAL_CPUS` CPUs whatever the size, and below the break-even elsewhere.

Break-even on one node with ``cpus`` CPUs: in-process time ``rows / R`` against Ray's
``S + rows / (R * E * cpus)`` (``R`` rows/s of one core, ``E`` parallel efficiency, ``S`` Ray's fixed
cost, :data:`RAY_FIXED_S`), so Ray wins above ``S * R / (1 - 1 / (E * cpus))`` rows.
``local_max_rows`` in the config replaces the rule on one node (above it: Ray). ``engine: ray`` and
``engine: local`` force an engine (``local`` on a multi-node cluster, or above ``local_max_rows``, is
allowed and logged as a warning).

The figures (both engines side by side on a 2-core machine at 1M-40M rows, benchmarks/evaluate.md):
in-process scores 0.9-2.5M rows/s on one core (:data:`ROWS_PER_S_PER_CORE` takes 1M); Ray's fixed
cost (:data:`RAY_FIXED_S`) is, standalone, its start plus the actors' start that preflight does not
hide (about 2.5 s), and on a running cluster that actor start alone (1.8-2.8 s; Ray shuts down beside
the artifact's write). On 2 CPUs the driver's merge and the reads take the second core: in-process is
faster at 1M, 5M, 20M and 40M rows (24.8 s against Ray's 30.5 s at 40M), so Ray is never chosen there
(:data:`MAX_LOCAL_CPUS`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common.engine_choice import EngineChoice
from airflow_ray_provider.workloads.common.progress import Progress
from airflow_ray_provider.workloads.evaluation.packing import ModelGroup, Resources, demands_of, pack_models

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.common.ray_session import RayCloser
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.driver_scoring import DriverScorer
    from airflow_ray_provider.workloads.evaluation.phases import PhaseClock
    from airflow_ray_provider.workloads.evaluation.preflight import Preflight, PreflightRun

log = logging.getLogger(__name__)

#: Rows/s of the per-block code on one core (benchmarks/evaluate.md: 0.9-1.8M on the 2-core machine).
ROWS_PER_S_PER_CORE = 1_000_000
#: Share of ``cpus`` x one core's speed the Ray pool reaches (reads, driver and merge share the cores).
RAY_EFFICIENCY = 0.8
#: Ray's fixed cost in seconds: on a running cluster the actor start-up left after preflight overlaps;
#: standalone also Ray's own start (4-5 s on 2 cores: ``ray.init`` of a private Ray with its dashboard
#: process, autoscaler monitor and log monitor, benchmarks/private_ray.md).
RAY_FIXED_S = {"connected": 2.5, "standalone": 7.5}
#: On one node with at most this many CPUs auto never uses Ray (slower there at 1M-40M rows).
MAX_LOCAL_CPUS = 2
#: Block threads of the in-process engine (at most this CPUs' count): on 2 cores they keep 1.4-1.6 cores
#: busy (the GIL holds the rest); more would hold more blocks in memory for little gain. The break-even
#: above still takes one core's speed for in-process, so on larger nodes Ray is chosen somewhat early.
BLOCK_THREADS = 2


def break_even_rows(cpus: float, fixed_s: float) -> int | None:
    """Rows above which Ray's ``cpus`` on one node pay back its ``fixed_s`` (``None``: never)."""
    if cpus <= MAX_LOCAL_CPUS:
        return None
    gain = 1.0 - 1.0 / (RAY_EFFICIENCY * cpus)
    return int(fixed_s * ROWS_PER_S_PER_CORE / gain)


def choose_engine(
    requested: str, rows: int, *, cpus: float, nodes: int, standalone: bool, local_max_rows: int | None
) -> EngineChoice:
    """Decide the engine (pure).

    :param requested: ``auto``, ``ray`` or ``local`` (the config's ``engine``).
    :param rows: rows in the input; :param cpus: the cluster's CPUs; :param nodes: its alive nodes.
    :param standalone: no Ray runs yet (choosing Ray means starting one).
    :param local_max_rows: the config's threshold (``None``: :func:`break_even_rows`).
    """
    fixed = RAY_FIXED_S["standalone" if standalone else "connected"]
    limit = local_max_rows if local_max_rows is not None else break_even_rows(cpus, fixed)
    shown = "none" if limit is None else f"{limit:,} rows"
    where = f"{rows:,} rows, {nodes} node(s), {cpus:g} CPUs, in-process limit {shown}"
    if requested == "ray":
        return EngineChoice("ray", f"engine: ray in the config ({where})")
    if requested == "local":
        if nodes > 1 or (limit is not None and rows > limit):
            log.warning(
                "engine: local on %s: one process scores everything; engine: auto would use Ray here", where
            )
        return EngineChoice("local", f"engine: local in the config ({where})")
    if nodes > 1:
        return EngineChoice("ray", f"auto: a multi-node cluster always uses Ray ({where})")
    if limit is None:
        return EngineChoice(
            "local",
            f"auto: one node with <= {MAX_LOCAL_CPUS} CPUs is faster in-process at any size ({where})",
        )
    if rows > limit:
        return EngineChoice("ray", f"auto: input above the in-process limit ({where})")
    return EngineChoice("local", f"auto: too small for Ray's fixed cost to pay back ({where})")


def ray_initialized() -> bool:
    """Whether Ray is initialised in this process (without importing Ray when nothing imported it)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def local_cpus() -> int:
    """CPUs this process may use (what a private local Ray would get)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def cluster_shape() -> tuple[float, int]:
    """``(CPUs, alive nodes)`` of the connected Ray cluster."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return float(ray.cluster_resources().get("CPU", 0.0)), max(len(nodes), 1)


def ray_nodes() -> list[Resources]:
    """What each alive node of the connected Ray cluster offers (its total, not what is free)."""
    import ray

    out = []
    for node in ray.nodes():
        if node.get("Alive"):
            have = node.get("Resources", {})
            out.append(Resources(have.get("CPU", 0.0), have.get("GPU", 0.0), have.get("memory", 0.0)))
    return out


def this_machine() -> Resources:
    """This machine as the one node of a run without Ray (its CPUs and memory; GPUs are Ray's to find)."""
    memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return Resources(float(local_cpus()), 0.0, memory)


def plan_groups(cfg: EvalConfig, nodes: list[Resources], *, can_grow: bool = False) -> list[ModelGroup]:
    """The model groups of this run (:func:`~.packing.pack_models`), logged.

    :param can_grow: the cluster's autoscaler may add nodes (a model no node holds yet then waits).
    :raises ConfigError: a model declares more than any of ``nodes`` offers (before any block is read).
    """
    groups = pack_models(demands_of(cfg), nodes, max_models=cfg.scoring.models_per_actor, can_grow=can_grow)
    log.info(
        "%d model group(s): %s",
        len(groups),
        "; ".join(f"{'GPU' if g.gpu else 'CPU'} {list(g.models)}" for g in groups),
    )
    return groups


@dataclass
class EngineRun:
    """What :func:`run_engine` did: merged partials, engine choice, Ray session, groups, bytes read."""

    acc: Accumulator
    choice: EngineChoice
    session_mode: str
    groups: list[ModelGroup]
    bytes_read: int


def run_engine(
    cfg: EvalConfig,
    checks: PreflightRun,
    address: str | None,
    predictions_uri: str | None,
    clock: PhaseClock,
    closer: RayCloser | None = None,
) -> EngineRun:
    """Choose the engine, pack the models, score everything with it, while ``checks`` runs preflight.

    A standalone run that stays in-process never imports or starts Ray (unless a model declares GPUs:
    Ray finds them); otherwise a private Ray starts at once, beside preflight, and a running cluster is
    connected to once the driver holds its first block (below). The choice is made once connected (the
    cluster's CPUs and nodes are known then) and preflight has the row count, and the models are packed
    against the cluster's nodes before any block is read. Meanwhile, once preflight has passed, the
    driver scores blocks on a thread (:mod:`~.driver_scoring`; not with a GPU model), whichever engine
    is then chosen: both take the blocks it has not.

    Why a running cluster waits for the driver's first block: importing Ray and ``ray.init`` take about
    0.5 CPU-seconds of this process, under the same GIL as preflight's imports (scikit-learn, pyarrow:
    1.2-1.7 CPU-seconds) and the first block; beside them they delay the first row by about that much
    (benchmarks/evaluate.md). Connecting then takes 0.75-1.4 s of wall on 2 cores
    (``ray_init_s``), beside the driver's scoring, and the actors on the driver's node start only
    after preflight anyway. The cost: on several nodes the actors start after the first block rather
    than beside preflight. A run with a GPU model (no driver thread) connects at once.

    :param checks: the preflight running on its thread (:class:`~.preflight.PreflightRun`).
    :param address: the explicit Ray address (config or caller), if any.
    :param closer: shuts Ray down beside the caller's remaining work (``None``: before returning).
    """
    from airflow_ray_provider.workloads.common.ray_session import SessionMode, plan_session, ray_session
    from airflow_ray_provider.workloads.evaluation.driver_scoring import DriverScorer
    from airflow_ray_provider.workloads.evaluation.pipeline import stream_on_ray

    planned = plan_session(address, environ=os.environ, initialized=ray_initialized())
    wants_gpus = any(m.resources.num_gpus > 0 for m in cfg.models)
    if planned.mode is SessionMode.LOCAL and cfg.engine != "ray" and not wants_gpus:
        choice = choose_engine(
            cfg.engine,
            checks.shape().rows,
            cpus=local_cpus(),
            nodes=1,
            standalone=True,
            local_max_rows=cfg.local_max_rows,
        )
        if choice.engine == "local":
            log.info("engine local: %s", choice.reason)
            groups = plan_groups(cfg, [this_machine()])
            acc, nbytes = stream_in_process(cfg, checks.result(), groups, predictions_uri, clock)
            return EngineRun(acc, choice, "none", groups, nbytes)
    cpu_only = not wants_gpus and cfg.scoring.num_gpus == 0  # a GPU group's models stay on its actors
    with contextlib.ExitStack() as stack:
        driver = stack.enter_context(DriverScorer(cfg, checks, predictions_uri)) if cpu_only else None
        if driver is not None and planned.mode in (SessionMode.ADDRESS, SessionMode.JOB, SessionMode.ENV):
            driver.first_block()  # a running cluster: connect once the driver holds its first block
        clock.mark("ray_start")
        session = stack.enter_context(ray_session(address, closer))
        clock.mark("ray")
        from airflow_ray_provider.workloads.common import autoscaling

        nodes, can_grow = ray_nodes(), autoscaling()
        groups = plan_groups(cfg, nodes, can_grow=can_grow)
        cpus, count = cluster_shape()
        standalone = session.mode is SessionMode.LOCAL
        choice = choose_engine(
            cfg.engine,
            checks.shape().rows,
            cpus=cpus,
            nodes=count,
            standalone=standalone,
            local_max_rows=cfg.local_max_rows,
        )
        log.info("engine %s: %s", choice.engine, choice.reason)
        if choice.engine == "local":
            acc, nbytes = stream_in_process(cfg, checks.result(), groups, predictions_uri, clock, driver)
        else:  # a private one-node Ray has no other node to restart an actor on
            acc, nbytes = stream_on_ray(
                cfg,
                checks,
                groups,
                nodes,
                predictions_uri,
                clock,
                driver,
                restart_actors=not standalone,
                can_grow=can_grow,
            )
    clock.mark("ray_closed")
    return EngineRun(acc, choice, session.mode.value, groups, nbytes)


def stream_in_process(
    cfg: EvalConfig,
    pre: Preflight,
    groups: list[ModelGroup],
    predictions_uri: str | None,
    clock: PhaseClock,
    driver: DriverScorer | None = None,
) -> tuple[Accumulator, int]:
    """Score every read unit here, with the preflight's models, on up to :data:`BLOCK_THREADS` threads.

    Each thread reads a unit once and gives it to every group's evaluator (the same packing as on Ray);
    this thread merges the partials in unit order. The reads, numpy's sorts and ufuncs and the models'
    matrix products release the GIL, so two blocks in flight keep two cores busy; at most one more unit
    than threads is held (memory does not grow with the input). With several block threads, BLAS and
    OpenMP run one thread each (:func:`~.block.native_threads`), as in a Ray actor.

    :param clock: receives the ``pipeline``, ``first_scoring``, ``first_row`` and ``last_row`` marks.
    :param driver: the driver's scoring thread of a Ray session (:mod:`~.driver_scoring`), stopped
        here: its blocks are kept, the units it did not take are scored here.
    :returns: the merged partials and the stored bytes read.
    """
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.block import (
        BlockEvaluator,
        BlockPartial,
        merge_partials,
        native_threads,
    )
    from airflow_ray_provider.workloads.evaluation.driver_scoring import UnitQueue
    from airflow_ray_provider.workloads.evaluation.source import read_unit_counted

    acc = Accumulator(cfg, pre.has_proba)
    clock.mark("pipeline")
    progress = Progress(pre.rows, "rows", cfg.progress_interval_s, logger=log)
    nbytes = 0
    queue = UnitQueue(len(pre.units))
    if driver is not None:
        queue = driver.queue()
        for partial, read in driver.stop():
            nbytes += read
            acc.add(partial)
            progress.add(int(partial["rows"]))
    evaluators = [
        BlockEvaluator(cfg, pre.features, pre.has_proba, predictions_uri, models=pre.loaded, names=g.models)
        for g in groups
    ]

    def work(unit: dict[str, Any]) -> tuple[BlockPartial, int]:
        table, read = read_unit_counted(unit, cfg.data_uri, pre.read_columns)
        return merge_partials([e.evaluate(table) for e in evaluators]), read

    threads = max(1, min(local_cpus(), BLOCK_THREADS, len(pre.units)))
    units = (pre.units[i] for i in iter(queue.front, None))
    with (
        progress.reporting(),
        native_threads(1 if threads > 1 else None),
        concurrent.futures.ThreadPoolExecutor(threads, "eval-block") as pool,
    ):
        clock.mark("first_scoring")
        pending = collections.deque(pool.submit(work, u) for u in itertools.islice(units, threads + 1))
        try:
            while pending:
                partial, read = pending.popleft().result()
                pending.extend(pool.submit(work, u) for u in itertools.islice(units, 1))
                nbytes += read
                acc.add(partial)
                progress.add(int(partial["rows"]))
        finally:  # a failed block: do not score the units queued behind it
            for future in pending:
                future.cancel()
    clock.mark_rows(progress.first_at, driver.first_at if driver else None, last=progress.last_at)
    return acc, nbytes

"""The Ray engine: read tasks -> one scoring actor pool per model group -> partials merged on the driver.

Each read unit (contiguous Parquet row groups, :mod:`~.source`) is read once, by one Ray task; its table
stays in the object store and its object ref is handed to one actor of every model group
(:mod:`~.packing`): CPU and GPU groups are separate pools in the same run, each reserving what its
models declare. When every group has scored a block, its partials are merged into one
(:func:`~.block.merge_partials`) and added to the exact accumulator; the table is then released. At most
:func:`blocks_in_flight` blocks are read ahead, so memory stays flat as the data grows. From the end of
preflight the driver scores blocks from the end of the input itself, on a thread, with the models
preflight loaded (:mod:`~.driver_scoring`; CPU groups only), while Ray connects (or starts; a
running cluster once that thread holds its first block, :func:`~.engine.run_engine`) and the actors
start, until every actor is ready: the first rows wait neither for ``ray.init`` nor for the actors.
(It stops then: scoring on to the end is slower, three scorers on two cores.)

Node loss: read tasks retry without limit (a lost block is rebuilt from its read task's lineage), and
scoring actors restart and retry their calls without limit (``max_restarts=-1, max_task_retries=-1``);
the merge is exact and order-independent, so a run that lost a node yields the same metrics. Errors
raised in an actor keep their class (a ``DataError`` found deep in the data reaches the driver as itself).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common.errors import ConfigError, workload_error_from
from airflow_ray_provider.workloads.common.progress import Progress
from airflow_ray_provider.workloads.evaluation.packing import (
    ModelGroup,
    Resources,
    actor_counts,
    actor_needs,
    cluster_room,
)

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.block import BlockPartial
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.driver_scoring import DriverScorer
    from airflow_ray_provider.workloads.evaluation.phases import PhaseClock
    from airflow_ray_provider.workloads.evaluation.preflight import Preflight, PreflightRun

log = logging.getLogger(__name__)


def pool_sizes(
    cfg: EvalConfig,
    groups: Sequence[ModelGroup],
    nodes: Sequence[Resources],
    blocks: int,
    *,
    can_grow: bool = False,
) -> list[int]:
    """Actors per group: ``scoring.concurrency`` (its upper bound), at most one per block, lowered
    until every pool and one read task fit the cluster at once (never below ``[min, max]``'s ``min``,
    or one).

    :param can_grow: an autoscaler may add nodes: pools that do not fit yet are logged, not refused.
    :raises ConfigError: the pools cannot all run at once on this cluster (the run would wait forever).
    """
    conc = cfg.scoring.concurrency
    low, high = conc if isinstance(conc, tuple) else (1, conc)
    wanted = [max(1, min(high, blocks))] * len(groups)
    per_actor = [actor_needs(g, cfg) for g in groups]
    room = cluster_room(nodes, cfg.scoring.read_num_cpus)
    counts = [max(n, min(low, w)) for n, w in zip(actor_counts(wanted, per_actor, room), wanted, strict=True)]
    total = Resources()
    for n, need in zip(counts, per_actor, strict=True):
        total = total + need.scaled(n)
    if not total.fits(room):
        message = (
            f"the {len(groups)} model group(s) need {total.describe()} at once ({counts} actors; every "
            f"group scores every block), but the cluster offers {room.describe()} beside one read task: "
            "lower the models' num_cpus / num_gpus / memory or scoring.num_cpus, raise "
            "scoring.models_per_actor (fewer groups), or add nodes"
        )
        if not can_grow:
            raise ConfigError(message)
        log.warning("%s; waiting for the autoscaler", message)
    return counts


def blocks_in_flight(cfg: EvalConfig, pre: Preflight, sizes: Sequence[int]) -> int:
    """Blocks read ahead: enough to keep the largest pool busy, capped by ``scoring.object_store_mb``."""
    busy = 2 * max(sizes, default=1)
    if not cfg.scoring.object_store_mb or not pre.units:
        return busy
    per_block = max(1, 8 * len(pre.read_columns) * pre.rows // len(pre.units))  # float64-sized columns
    return max(1, min(busy, cfg.scoring.object_store_mb * 1024 * 1024 // per_block))


def ship_models(cfg: EvalConfig, pre: Preflight, groups: Sequence[ModelGroup]) -> dict[str, Any]:
    """Object refs to the models preflight loaded: put once, fetched by their group's actors.

    Factory models of a GPU group stay out (the actor builds them on its own device), and so does a
    model that cannot be pickled (the actor loads it from its spec).
    """
    import ray

    on_gpu = {m for g in groups if actor_needs(g, cfg).num_gpus > 0 for m in g.models}
    refs: dict[str, Any] = {}
    for name, loaded in pre.loaded.items():
        if loaded.sha256 is None and name in on_gpu:
            continue
        try:
            refs[name] = ray.put(loaded)
        except Exception as exc:  # any pickling failure: the actor loads the model itself
            log.info("model %r is loaded in each actor (%s: %s)", name, type(exc).__name__, exc)
    return refs


@dataclass
class _Pool:
    """The actors of one model group and how many calls each has outstanding."""

    actors: list[Any]
    busy: list[int] = field(default_factory=list)

    def submit(self, table_ref: Any, setup_ref: Any) -> tuple[Any, int]:
        """Give the block to the least busy actor; returns ``(partial ref, actor index)``."""
        i = min(range(len(self.actors)), key=lambda k: self.busy[k])
        self.busy[i] += 1
        return self.actors[i].score_block.remote(table_ref, setup_ref), i


def _start_pools(
    cfg: EvalConfig,
    groups: Sequence[ModelGroup],
    sizes: Sequence[int],
    predictions_uri: str | None,
    restart_actors: bool,
) -> list[_Pool]:
    """Create every group's actors before preflight's findings exist (they import while it runs)."""
    import ray

    from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator

    actor_class = ray.remote(BlockEvaluator)
    retries = -1 if restart_actors else 0
    pools = []
    for group, size in zip(groups, sizes, strict=True):
        needs = actor_needs(group, cfg)
        options: dict[str, Any] = {
            "num_cpus": needs.num_cpus,
            "num_gpus": needs.num_gpus,
            "max_restarts": retries,
            "max_task_retries": retries,
        }
        if needs.memory:
            options["memory"] = needs.memory
        device = "cuda" if needs.num_gpus > 0 else "cpu"
        threads = max(1, int(needs.num_cpus))
        actors = [
            actor_class.options(**options).remote(  # type: ignore[attr-defined]
                cfg, None, None, predictions_uri, None, group.models, device, threads
            )
            for _ in range(size)
        ]
        pools.append(_Pool(actors, [0] * size))
    return pools


def _prepare_pools(
    cfg: EvalConfig, pre: Preflight, groups: Sequence[ModelGroup], pools: list[_Pool]
) -> tuple[Any, list[Any]]:
    """Put preflight's findings and models once; every actor starts getting its models now.

    :returns: the :class:`~.block.Setup` ref, held for the whole run and passed with every block (an
        actor restarted after a node loss runs its constructor again and needs it, ray-project/ray#53727),
        and each actor's ``prepare`` ref (done: the actor is ready).
    """
    import ray

    from airflow_ray_provider.workloads.evaluation.block import Setup

    setup = ray.put(Setup(pre.features, pre.has_proba, ship_models(cfg, pre, groups)))
    ready = [actor.prepare.remote(setup) for pool in pools for actor in pool.actors]
    return setup, ready


@dataclass
class _Block:
    """A block being scored: its table ref, its read's byte count ref, one partial slot per group."""

    table: Any
    nbytes: Any
    parts: list[BlockPartial | None]


def stream_on_ray(
    cfg: EvalConfig,
    checks: PreflightRun,
    groups: Sequence[ModelGroup],
    nodes: Sequence[Resources],
    predictions_uri: str | None,
    clock: PhaseClock,
    driver: DriverScorer | None = None,
    *,
    restart_actors: bool = True,
    can_grow: bool = False,
) -> tuple[Accumulator, int]:
    """Read each unit once, score it in every group's pool, merge every block's partials as they arrive.

    On a multi-node cluster the pools are created as soon as preflight knows the input's blocks, so the
    actors start while its checks run (when Ray was connected before preflight ended: a running cluster
    is connected to only once the driver's thread holds its first block, :func:`~.engine.run_engine`);
    on one node (the driver's own) only once preflight has passed, since their start takes the cores
    preflight and the driver's first block need (on 2 cores, benchmarks/evaluate.md).
    Preflight's models are then put once and fetched by every actor before its first block.

    :param checks: the preflight running on its thread.
    :param nodes: the cluster's nodes (pools are sized to fit them all at once).
    :param clock: receives the ``pipeline``, ``first_scoring``, ``first_row`` and ``last_row`` marks.
    :param driver: the driver's own scoring thread (:mod:`~.driver_scoring`; ``None``: a run with a GPU
        group): the pools take the units from the front of its queue, it takes them from the back
        until every actor is ready.
    :param restart_actors: restart a dead scoring actor (what a lost node needs). ``False`` on a
        private one-node Ray (standalone): there is no other node to restart on.
    :param can_grow: an autoscaler may add nodes (see :func:`pool_sizes`).
    :returns: the merged partials and the stored bytes the read tasks (and the driver) read.
    :raises WorkloadError: the one a scoring actor raised (bad labels deep in the data, a model that
        fails on a block), with its own class and message.
    """
    import ray

    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.driver_scoring import UnitQueue
    from airflow_ray_provider.workloads.evaluation.source import read_unit_counted

    sizes = pool_sizes(cfg, groups, nodes, checks.shape().blocks, can_grow=can_grow)
    clock.mark("pipeline")
    log.info("scoring pools: %s actors", sizes)
    pools: list[_Pool] = []
    if len(nodes) > 1:  # on one node the actors would take the cores preflight and the driver need
        pools = _start_pools(cfg, groups, sizes, predictions_uri, restart_actors)
    try:
        pre = checks.result()
        queue = driver.queue() if driver is not None else UnitQueue(len(pre.units))
        if not pools and len(queue):  # (the driver took every block while Ray started: no actors)
            pools = _start_pools(cfg, groups, sizes, predictions_uri, restart_actors)
        setup, ready = _prepare_pools(cfg, pre, groups, pools) if pools else (None, [])
    except BaseException:
        _kill(pools)
        raise
    acc = Accumulator(cfg, pre.has_proba)
    read = ray.remote(read_unit_counted).options(
        num_cpus=cfg.scoring.read_num_cpus, num_returns=2, max_retries=-1
    )
    stream = _Stream(cfg, pools, setup, read, blocks_in_flight(cfg, pre, sizes), pre.read_columns)
    progress = Progress(pre.rows, "rows", cfg.progress_interval_s, logger=log)
    nbytes = 0

    def add(partial: BlockPartial, read_bytes: int) -> None:
        nonlocal nbytes
        acc.add(partial)
        nbytes += read_bytes
        progress.add(int(partial["rows"]))

    try:
        with progress.reporting():
            while True:
                for partial, read_bytes in driver.take() if driver is not None else ():
                    add(partial, read_bytes)
                if driver is not None and ready and _all_ready(ready):
                    driver.halt()  # every actor scores now: their cores are no longer the driver's
                    ready = []
                while stream.has_room() and (unit := queue.front()) is not None:
                    stream.submit(unit, pre.units[unit])
                if not stream.waiting:
                    break
                for partial, read_bytes in stream.collect():
                    add(partial, read_bytes)
            for partial, read_bytes in driver.stop() if driver is not None else ():
                add(partial, read_bytes)
    except Exception as exc:
        inner = workload_error_from(exc)
        if inner is not None:
            raise inner from exc
        raise
    finally:
        _kill(pools)
    clock.mark_rows(progress.first_at, driver.first_at if driver else None, last=progress.last_at)
    if acc.span[0] != float("inf"):
        clock.mark("first_scoring", clock.from_wall(acc.span[0]))
    return acc, nbytes


class _Stream:
    """The blocks on their way through the pools: read tasks submitted, partials collected and merged.

    :param setup: the :class:`~.block.Setup` ref passed with every block; :param read: the read task.
    :param window: blocks read ahead at most (:func:`blocks_in_flight`); :param columns: columns read.
    """

    def __init__(
        self, cfg: EvalConfig, pools: list[_Pool], setup: Any, read: Any, window: int, columns: list[str]
    ) -> None:
        self.cfg, self.pools, self.setup, self.read = cfg, pools, setup, read
        self.window, self.columns = window, columns
        self.blocks: dict[int, _Block] = {}
        self.waiting: dict[Any, tuple[int, int, int]] = {}  # partial ref -> (block, group, actor)

    def has_room(self) -> bool:
        """Whether another block may be read ahead."""
        return len(self.blocks) < self.window

    def submit(self, index: int, unit: dict[str, Any]) -> None:
        """Read unit ``index`` in a task; hand its table to one actor of every pool."""
        refs: Any = self.read.remote(unit, self.cfg.data_uri, self.columns)
        table, count = refs  # num_returns=2: two object refs
        self.blocks[index] = _Block(table, count, [None] * len(self.pools))
        for g, pool in enumerate(self.pools):
            ref, actor = pool.submit(table, self.setup)
            self.waiting[ref] = (index, g, actor)

    def collect(self) -> list[tuple[BlockPartial, int]]:
        """Wait for a partial; return the blocks it completed (merged) with their stored bytes."""
        import ray

        from airflow_ray_provider.workloads.evaluation.block import merge_partials

        out = []
        done, _ = ray.wait(list(self.waiting), num_returns=1)
        for ref in done:
            b, g, actor = self.waiting.pop(ref)
            self.pools[g].busy[actor] -= 1
            block = self.blocks[b]
            block.parts[g] = ray.get(ref)
            if all(p is not None for p in block.parts):
                merged = merge_partials([p for p in block.parts if p is not None])
                out.append((merged, int(ray.get(block.nbytes))))
                del self.blocks[b]
        return out


def _all_ready(ready: list[Any]) -> bool:
    """Whether every actor's ``prepare`` is done (without waiting)."""
    import ray

    return len(ray.wait(ready, num_returns=len(ready), timeout=0)[0]) == len(ready)


def _kill(pools: list[_Pool]) -> None:
    import ray

    for pool in pools:
        for actor in pool.actors:
            ray.kill(actor)

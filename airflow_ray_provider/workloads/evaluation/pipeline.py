"""The Ray engine: read tasks -> one scoring actor pool per model group -> partials merged on the driver.

Each read unit (contiguous Parquet row groups, :mod:`~.source`) is read once, by one Ray task; its table
stays in the object store and its object ref is handed to one actor of every model group
(:mod:`~.packing`): CPU and GPU groups are separate pools in the same run, each reserving what its
models declare. When every group has scored a block, its partials are merged into one
(:func:`~.block.merge_partials`) and added to the exact accumulator; the table is then released. At most
:func:`blocks_in_flight` blocks are read ahead, so memory stays flat as the data grows. While the actors
start, the driver scores one block from the end of the input itself with the models preflight loaded
(:class:`_DriverShare`; CPU groups only), so the first rows do not wait for the actors' start.

Node loss: read tasks retry without limit (a lost block is rebuilt from its read task's lineage), and
scoring actors restart and retry their calls without limit (``max_restarts=-1, max_task_retries=-1``);
the merge is exact and order-independent, so a run that lost a node yields the same metrics. Errors
raised in an actor keep their class (a ``DataError`` found deep in the data reaches the driver as itself).
"""

from __future__ import annotations

import collections
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
        actors = [
            actor_class.options(**options).remote(  # type: ignore[attr-defined]
                cfg, None, None, predictions_uri, None, group.models, device
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


#: Blocks the driver scores at most while the actors start. More was measured slower on 2 cores: the
#: driver's scoring takes the CPU the actors' start needs (benchmarks/evaluate.md, issue 27).
DRIVER_MAX_BLOCKS = 1


class _DriverShare:
    """The driver's own scoring while no actor is ready (at most :data:`DRIVER_MAX_BLOCKS`): the same
    per-block code, the models preflight loaded (a run with a GPU group leaves everything to its pools).

    :param ready: the actors' ``prepare`` refs (one done: an actor is ready, the driver stops for good).
    """

    def __init__(
        self,
        cfg: EvalConfig,
        pre: Preflight,
        groups: Sequence[ModelGroup],
        predictions_uri: str | None,
        ready: list[Any],
    ) -> None:
        from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator, Setup

        self.cfg, self.pre, self.ready, self.blocks = cfg, pre, ready, 0
        self.setup = Setup(pre.features, pre.has_proba, pre.loaded)
        gpu = any(actor_needs(g, cfg).num_gpus > 0 for g in groups)
        self.evaluator = (
            None
            if gpu
            else BlockEvaluator(cfg, pre.features, pre.has_proba, predictions_uri, models=pre.loaded)
        )

    def active(self) -> bool:
        """Whether the driver still scores (no actor ready yet)."""
        import ray

        if self.evaluator is not None and (
            self.blocks >= DRIVER_MAX_BLOCKS or ray.wait(self.ready, num_returns=1, timeout=0)[0]
        ):
            self.evaluator = None
            log.info("the driver scored %d block(s) while the actors started", self.blocks)
        return self.evaluator is not None

    def score(self, unit: dict[str, Any]) -> tuple[BlockPartial, int]:
        """Read and score one unit here; returns its partial and the stored bytes read."""
        from airflow_ray_provider.workloads.evaluation.source import read_unit_counted

        assert self.evaluator is not None
        table, nbytes = read_unit_counted(unit, self.cfg.data_uri, self.pre.read_columns)
        self.blocks += 1
        return self.evaluator.score_block(table, self.setup), nbytes


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
    *,
    restart_actors: bool = True,
    can_grow: bool = False,
) -> tuple[Accumulator, int]:
    """Read each unit once, score it in every group's pool, merge every block's partials as they arrive.

    The pools are created as soon as preflight knows the input's blocks, so the actors start while its
    checks run; its models are then put once and fetched by every actor before its first block.

    :param checks: the preflight running on its thread.
    :param nodes: the cluster's nodes (pools are sized to fit them all at once).
    :param clock: receives the ``pipeline``, ``first_scoring``, ``first_row`` and ``last_row`` marks.
    :param restart_actors: restart a dead scoring actor (what a lost node needs). ``False`` on a
        private one-node Ray (standalone): there is no other node to restart on.
    :param can_grow: an autoscaler may add nodes (see :func:`pool_sizes`).
    :returns: the merged partials and the stored bytes the read tasks read.
    :raises WorkloadError: the one a scoring actor raised (bad labels deep in the data, a model that
        fails on a block), with its own class and message.
    """
    import ray

    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.block import merge_partials
    from airflow_ray_provider.workloads.evaluation.source import read_unit_counted

    sizes = pool_sizes(cfg, groups, nodes, checks.shape().blocks, can_grow=can_grow)
    clock.mark("pipeline")
    log.info("scoring pools: %s actors", sizes)
    pools = _start_pools(cfg, groups, sizes, predictions_uri, restart_actors)
    try:
        pre = checks.result()
        setup, ready = _prepare_pools(cfg, pre, groups, pools)
    except BaseException:
        _kill(pools)
        raise
    acc = Accumulator(cfg, pre.has_proba)
    read = ray.remote(read_unit_counted).options(
        num_cpus=cfg.scoring.read_num_cpus, num_returns=2, max_retries=-1
    )
    window = blocks_in_flight(cfg, pre, sizes)
    blocks: dict[int, _Block] = {}
    waiting: dict[Any, tuple[int, int, int]] = {}  # partial ref -> (block, group, actor)
    progress = Progress(pre.rows, "rows", cfg.progress_interval_s, logger=log)
    todo = collections.deque(range(len(pre.units)))  # the pools take from the front, the driver the back
    share = _DriverShare(cfg, pre, groups, predictions_uri, ready)
    nbytes = 0
    try:
        with progress.reporting():
            while todo or waiting:
                while todo and len(blocks) < window:
                    unit = todo.popleft()
                    refs: Any = read.remote(pre.units[unit], cfg.data_uri, pre.read_columns)
                    table, count = refs  # num_returns=2: two object refs
                    blocks[unit] = _Block(table, count, [None] * len(pools))
                    for g, pool in enumerate(pools):
                        ref, actor = pool.submit(table, setup)
                        waiting[ref] = (unit, g, actor)
                if todo and share.active():
                    mine, read_bytes = share.score(pre.units[todo.pop()])
                    acc.add(mine)
                    nbytes += read_bytes
                    progress.add(int(mine["rows"]))
                    continue
                done, _ = ray.wait(list(waiting), num_returns=1)
                for ref in done:
                    b, g, actor = waiting.pop(ref)
                    pools[g].busy[actor] -= 1
                    block = blocks[b]
                    block.parts[g] = ray.get(ref)
                    if all(p is not None for p in block.parts):
                        partial = merge_partials([p for p in block.parts if p is not None])
                        acc.add(partial)
                        nbytes += int(ray.get(block.nbytes))
                        del blocks[b]
                        progress.add(int(partial["rows"]))
    except Exception as exc:
        inner = workload_error_from(exc)
        if inner is not None:
            raise inner from exc
        raise
    finally:
        _kill(pools)
    _mark_stream(clock, progress, acc)
    return acc, nbytes


def _kill(pools: list[_Pool]) -> None:
    import ray

    for pool in pools:
        for actor in pool.actors:
            ray.kill(actor)


def _mark_stream(clock: PhaseClock, progress: Progress, acc: Accumulator) -> None:
    """Copy the stream's first/last row times and the actors' first scoring start onto ``clock``."""
    if progress.first_at is not None and progress.last_at is not None:
        clock.mark("first_row", progress.first_at)
        clock.mark("last_row", progress.last_at)
    if acc.span[0] != float("inf"):
        clock.mark("first_scoring", clock.from_wall(acc.span[0]))

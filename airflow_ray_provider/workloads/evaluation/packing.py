"""Packing models into scoring actor groups by what each declares it needs (pure: no Ray here).

A model entry may declare ``num_cpus``, ``num_gpus`` and ``memory`` (bytes): what scoring it reserves.
Models are packed first-fit-decreasing (largest GPU, then CPU, then memory demand first) into groups
whose summed demand still fits one node of the cluster, and a GPU model never shares a group with a
CPU-only one; ``scoring.models_per_actor`` caps the models of one group. Each group becomes an actor
pool of its own (GPU groups reserve GPUs, CPU groups do not), and every block of the log, read once,
goes to every group (:mod:`~.pipeline`, :mod:`~.engine`). A model that declares nothing needs nothing
beyond its actor's ``scoring.num_cpus``: with no declarations every model lands in one group.

:func:`pack_models` also refuses a model that no single node can hold, naming the model and the field,
before any block is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common.errors import ConfigError

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig

#: The declarable fields, in the order they are reported.
FIELDS = ("num_cpus", "num_gpus", "memory")
_SLACK = 1e-9  # fractional CPUs summed in floating point: 0.1 * 3 must still fit 0.3


@dataclass(frozen=True)
class Resources:
    """CPUs, GPUs and memory (bytes): a model's declared demand, a group's sum, or a node's capacity."""

    num_cpus: float = 0.0
    num_gpus: float = 0.0
    memory: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.num_cpus + other.num_cpus, self.num_gpus + other.num_gpus, self.memory + other.memory
        )

    def scaled(self, factor: int) -> Resources:
        """``factor`` times these resources (``factor`` actors of one group)."""
        return Resources(self.num_cpus * factor, self.num_gpus * factor, self.memory * factor)

    def fits(self, capacity: Resources) -> bool:
        """Whether every field is at most ``capacity``'s."""
        return self.exceeding(capacity) == []

    def exceeding(self, capacity: Resources) -> list[str]:
        """The fields above ``capacity``'s."""
        return [f for f in FIELDS if getattr(self, f) > getattr(capacity, f) * (1 + _SLACK) + _SLACK]

    def describe(self) -> str:
        """``2 CPUs, 1 GPU, 4.0 GiB``."""
        return f"{self.num_cpus:g} CPUs, {self.num_gpus:g} GPUs, {self.memory / 2**30:.1f} GiB memory"


@dataclass(frozen=True)
class ModelGroup:
    """Models scored by the same actors, and what one such actor reserves for them.

    :param models: model names, in config order.
    :param needs: the sum of the models' declared resources.
    :param gpu: whether the group's models need GPUs (such a group holds no CPU-only model).
    """

    models: tuple[str, ...]
    needs: Resources
    gpu: bool

    def as_dict(self) -> dict[str, Any]:
        """For ``run.packing`` in ``metrics.json``."""
        return {
            "models": list(self.models),
            "gpu": self.gpu,
            **{f: round(getattr(self.needs, f), 6) for f in FIELDS},
        }


def pack_models(
    demands: Mapping[str, Resources],
    nodes: Sequence[Resources],
    *,
    max_models: int = 0,
    can_grow: bool = False,
) -> list[ModelGroup]:
    """Pack models into groups, first-fit-decreasing; each group's sum fits one of ``nodes``.

    :param demands: each model's declared resources, in config order.
    :param nodes: what each node of the cluster offers (in total, not what is free now).
    :param max_models: most models in one group (0: no limit).
    :param can_grow: an autoscaler may add larger nodes: a model no node holds yet gets a group of its
        own (its actor waits for such a node) instead of an error.
    :raises ConfigError: naming the first model that no single node can hold, and the field(s).
    """
    order = list(demands)
    for name in order:
        if not can_grow:
            _check_some_node_holds(name, demands[name], nodes)
    largest_first = sorted(
        order, key=lambda n: (-demands[n].num_gpus, -demands[n].num_cpus, -demands[n].memory, order.index(n))
    )
    bins: list[tuple[list[str], Resources, bool]] = []
    for name in largest_first:
        need, gpu = demands[name], demands[name].num_gpus > 0
        for i, (members, total, is_gpu) in enumerate(bins):
            if is_gpu != gpu or (max_models and len(members) >= max_models):
                continue
            if any((total + need).fits(node) for node in nodes):
                bins[i] = ([*members, name], total + need, is_gpu)
                break
        else:
            bins.append(([name], need, gpu))
    groups = [ModelGroup(tuple(sorted(m, key=order.index)), total, gpu) for m, total, gpu in bins]
    return sorted(groups, key=lambda g: order.index(g.models[0]))


def _check_some_node_holds(name: str, need: Resources, nodes: Sequence[Resources]) -> None:
    if any(need.fits(node) for node in nodes):
        return
    over = sorted({f for node in nodes for f in need.exceeding(node)}, key=FIELDS.index) or list(FIELDS)
    declared = ", ".join(f"models.{name}.{f}={getattr(need, f):g}" for f in over)
    largest = max(nodes, key=lambda n: (n.num_gpus, n.num_cpus, n.memory)) if nodes else Resources()
    raise ConfigError(
        f"model {name!r} declares more than any node of the cluster offers ({declared}; "
        f"{len(nodes)} node(s), the largest {largest.describe()}): lower {' / '.join(over)} in "
        f"models.{name}, or run on a cluster with a node that large"
        + (" (one with a GPU)" if "num_gpus" in over else "")
    )


def actor_needs(group: ModelGroup, cfg: EvalConfig) -> Resources:
    """What one actor of ``group`` reserves: its models' sum, at least ``scoring.num_cpus`` CPUs.

    ``scoring.num_gpus`` (GPUs for every actor) still applies to groups whose models declare none.
    """
    return Resources(
        max(cfg.scoring.num_cpus, group.needs.num_cpus),
        max(cfg.scoring.num_gpus, group.needs.num_gpus),
        group.needs.memory,
    )


def actor_counts(wanted: Sequence[int], per_actor: Sequence[Resources], room: Resources) -> list[int]:
    """Actors per group: ``wanted``, lowered (largest pool first, never below 1) until all fit ``room``.

    Every group runs at once (each block goes to every group), so the pools share the cluster; an
    actor that never fits would stall the run. ``room`` is the cluster's total minus the read tasks.
    """
    counts = list(wanted)

    def total() -> Resources:
        out = Resources()
        for n, need in zip(counts, per_actor, strict=True):
            out = out + need.scaled(n)
        return out

    while not total().fits(room) and max(counts, default=1) > 1:
        i = max(range(len(counts)), key=lambda k: (counts[k], -k))
        counts[i] -= 1
    return counts


def demands_of(cfg: EvalConfig) -> dict[str, Resources]:
    """Each model's declared resources, in config order."""
    return {m.name: m.resources for m in cfg.models}


def cluster_room(nodes: Sequence[Resources], read_cpus: float) -> Resources:
    """The whole cluster's resources, less one read task's CPUs (so reads are never starved)."""
    total = Resources()
    for node in nodes:
        total = total + node
    return Resources(max(total.num_cpus - read_cpus, 0.0), total.num_gpus, total.memory)

"""The usage record of one Ray job, made from what the dashboard told and what the caller knows (pure):
**reserved** (the task's own cluster's nodes over the task's window, else the job's own requests),
**allocated** (:mod:`.allocation`) and, with prices, each worker group's reserved hours at its prices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_ray_provider.launch.usage.allocation import (
    GROUP_LABEL,
    HEAD_GROUP,
    Allocation,
    Window,
    add_hours,
    allocation,
    record_resources,
)
from airflow_ray_provider.launch.usage.prices import Prices, parse_prices

#: The record's schema; readers check it.
SCHEMA = "airflow-ray-usage/2"
#: Why allocated CPU is ``n/a`` for a job that ran while nothing in Ray's accounting held CPU: the driver
#: runs in the job's supervisor process, which reserves nothing unless the entrypoint asks.
DRIVER_NOT_COUNTED = (
    "the driver reserves no Ray resources: its work is not counted; set entrypoint_num_cpus to count it"
)


@dataclass(frozen=True)
class Node:
    """One node of the cluster: its worker group, resources and the time it was up (seconds)."""

    node_id: str
    group: str
    resources: dict[str, float]
    start: float | None
    end: float | None

    @classmethod
    def from_state(cls, row: Mapping[str, Any]) -> Node:
        """From one row of ``/api/v0/nodes?detail=true``."""
        head = HEAD_GROUP if row.get("is_head_node") else "default"
        group = (row.get("labels") or {}).get(GROUP_LABEL) or head
        start, end = (row.get(key) or 0 for key in ("start_time_ms", "end_time_ms"))
        return cls(str(row.get("node_id")), str(group), record_resources(row.get("resources_total")),
                   start / 1000.0 or None, end / 1000.0 or None)  # fmt: skip


@dataclass(frozen=True)
class UsageOptions:
    """What the record of a run's job is asked with: the operator's options, then what the run knows
    that the dashboard does not (JSON-safe: it travels to a trigger).

    :param mode: how the job runs (``ephemeral``, ``standing``, ``one_task``, ``task_ray``, ``rayjob``).
    :param cluster: the cluster's name, as the task knows it.
    :param own_cluster: the cluster is the run's own (reserved is then the whole cluster).
    :param entrypoint: the entrypoint's reservation (Ray names: ``CPU``, ``GPU``, ``memory`` bytes, ...).
    :param prices: the checked price table as a dict (``Prices.to_dict()``), if any.
    :param teardown_note: why ``phases.teardown_s`` is not in this record (``None``: not applicable,
        or the run adds it once the cluster is gone, with :func:`with_teardown`).
    :param submission_id: the job (the run fills it in, and the three below).
    :param task_started: when the task began waiting for its own cluster (seconds since the epoch).
    :param cluster_ready: when that cluster answered.
    :param ended_by: why the task stopped waiting (``finished``, ``timed_out``, ``killed``).
    """

    mode: str
    cluster: str
    own_cluster: bool = False
    entrypoint: dict[str, float] = field(default_factory=dict)
    prices: dict[str, Any] | None = None
    teardown_note: str | None = None
    submission_id: str = ""
    task_started: float | None = None
    cluster_ready: float | None = None
    ended_by: str = "finished"

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> UsageOptions | None:
        """The options of :meth:`to_dict` (``None``: no record)."""
        return cls(**data) if data else None


@dataclass
class JobReads:
    """What the dashboard told about one job; ``None`` where a read failed (``missing`` says why).

    :param job: the Job API's details (``/api/jobs/{id}``).
    :param nodes: the cluster's nodes, alive and dead.
    :param tasks: the job's task attempts (``/api/v0/tasks``).
    :param actors: the job's own actors, as :func:`~.dashboard.job_actors` counts them.
    :param supervisor: the job's supervisor actor (its start is the driver's).
    :param missing: what could not be read, and why (the record's ``not_available``).
    """

    job: dict[str, Any] | None = None
    nodes: list[Node] | None = None
    tasks: list[dict[str, Any]] | None = None
    actors: list[dict[str, Any]] | None = None
    supervisor: dict[str, Any] | None = None
    missing: dict[str, str] = field(default_factory=dict)


def reserved_by_group(nodes: Iterable[Node], window: Window) -> dict[str, dict[str, float]]:
    """Resource-hours of each worker group's nodes over the task's window (the task's own cluster)."""
    held, held_from = Allocation(), window.task_started or window.submitted
    for node in nodes:
        up = min(node.end or math.inf, window.ended) - max(node.start or 0.0, held_from)
        held.add(node.group, node.resources, up)
    return held.by_group


def total(by_group: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Resource-hours summed over the worker groups, rounded for the record."""
    out: dict[str, float] = {}
    for table in by_group.values():
        add_hours(out, table, 1.0)
    return {k: round(v, 6) for k, v in sorted(out.items())}


def cost(prices: Prices, by_group: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The estimate: each group's resource-hours at that group's prices (unpriced resources cost 0)."""
    by_resource: dict[str, float] = {}
    for group, table in by_group.items():
        rates = prices.for_group(group)
        for name, hours in table.items():
            if name in rates:
                by_resource[name] = by_resource.get(name, 0.0) + hours * rates[name]
    return {
        "amount": round(sum(by_resource.values()), 6),
        "currency": prices.currency,
        "by_resource": {k: round(v, 6) for k, v in sorted(by_resource.items())},
        "prices": prices.to_dict(),
    }


def utilisation(data: Mapping[str, Any]) -> dict[str, float | None]:
    """A record's allocated CPU as a share of its reserved CPU (``None`` where allocated CPU is ``n/a``),
    and allocated GPU of reserved GPU."""
    reserved, allocated = data.get("reserved") or {}, data.get("allocated") or {}
    share = {}
    for name in ("CPU", "GPU"):
        whole = reserved.get(name, 0.0)
        share[f"allocated_{name.lower()}"] = round(allocated.get(name, 0.0) / whole, 4) if whole > 0 else None
    if "allocated_cpu" in (data.get("not_available") or {}):
        share["allocated_cpu"] = None
    return share


def _figure(value: float) -> str:
    """Two significant digits, never in exponent notation (``3.2``, ``0.0031``, ``12``)."""
    if value >= 10 or value <= 0:
        return f"{value:.0f}"
    return f"{value:.{max(1, 1 - math.floor(math.log10(value)))}f}"


def usage_line(data: Mapping[str, Any]) -> str:
    """A record's log line: ``reserved 3.2 CPU-h, allocated 2.6 (81 %), ~$0.13`` (GPU-hours when any;
    ``allocated n/a (why)`` where Ray's accounting did not count the job's work)."""
    reserved, allocated = data.get("reserved") or {}, data.get("allocated") or {}
    share, why_na = utilisation(data)["allocated_cpu"], (data.get("not_available") or {}).get("allocated_cpu")
    line = f"reserved {_figure(reserved.get('CPU', 0.0))} CPU-h"
    ended_by = data.get("ended_by") or "finished"
    if ended_by != "finished":
        line = f"[job {ended_by.replace('_', ' ')}, {data.get('job_status') or 'status unknown'}] {line}"
    if reserved.get("GPU"):
        line += f" + {_figure(reserved['GPU'])} GPU-h"
    line += ", allocated " + ("n/a" if why_na else _figure(allocated.get("CPU", 0.0)))
    if share is not None:
        line += f" ({share * 100:.0f} %)"
    if allocated.get("GPU"):
        line += f" + {_figure(allocated['GPU'])} GPU-h"
    line += f" ({why_na})" if why_na else ""
    cost = data.get("cost")
    return line + (", " + Prices(currency=cost["currency"]).format(cost["amount"]) if cost else "")


def with_teardown(data: dict[str, Any], gone_at: float) -> dict[str, Any]:
    """A record's dict with ``phases.teardown_s``: from the job's end to ``gone_at`` (the cluster gone)."""
    phases = {**data["phases"], "teardown_s": round(max(0.0, gone_at - data["times"]["ended"]), 3)}
    missing = {k: v for k, v in (data.get("not_available") or {}).items() if k != "teardown"}
    return {**data, "phases": phases, "not_available": missing}


#: What the record says (``not_available``) about task attempts whose events Ray did not deliver, by the
#: :class:`~.allocation.Allocation` counter that counts them.
TASK_NOTES = {
    "unsettled": (
        "tasks_unsettled",
        "task attempt(s) had no end or no task:execute span (Ray did not deliver them): counted from their "
        "start to their end, else to their worker's next task attempt, else to the job's end",
    ),
    "timed_by_owner": (
        "tasks_timed_by_owner",
        "ended task attempt(s) had neither a start event nor a task:execute span (Ray lost their worker's "
        "events): counted from their owner's SUBMITTED_TO_WORKER to their end, an upper bound",
    ),
    "startless": (
        "tasks_without_start",
        "ended task attempt(s) had neither a start event, a task:execute span nor their owner's "
        "SUBMITTED_TO_WORKER (Ray lost them): not counted",
    ),
}


def make_record(reads: JobReads, request: UsageOptions, *, now: float) -> dict[str, Any]:
    """The job's record, the JSON object of docs/usage.md (XCom, ``usage.json``); what could not be read
    stays out and is named in ``not_available``.

    :param reads: what the dashboard told.
    :param request: what the caller knows.
    :param now: the collection time (the end of a job that has not ended).
    """
    job, missing = reads.job or {}, dict(reads.missing)
    window = Window(
        submitted=(job.get("start_time") or now * 1000.0) / 1000.0,
        ended=(job.get("end_time") or now * 1000.0) / 1000.0,
        driver_started=(reads.supervisor or {}).get("startTime", 0) / 1000.0 or None,
        task_started=request.task_started,
        cluster_ready=request.cluster_ready,
    )
    groups = {node.node_id: node.group for node in reads.nodes or []}
    counted = Allocation()
    if reads.tasks is not None or reads.actors is not None:
        counted = allocation(
            tasks=reads.tasks or [],
            actors=reads.actors or [],
            entrypoint=record_resources(request.entrypoint),
            window=window,
            node_groups=groups,
            driver_group=groups.get(str(job.get("driver_node_id") or ""), HEAD_GROUP),
        )
    if not job.get("end_time"):  # a job that has not ended has attempts still running
        counted.unsettled = 0
    for counter, (key, text) in TASK_NOTES.items():
        if getattr(counted, counter):
            missing[key] = f"{getattr(counted, counter)} {text}"
    if request.own_cluster and reads.nodes is not None:
        basis, reserved = "cluster", reserved_by_group(reads.nodes, window)
    else:
        if request.own_cluster:
            missing.setdefault(
                "reserved", "the cluster's nodes could not be read: reserved is the job's requests"
            )
        basis, reserved = "job requests", counted.by_group
    allocated = total(counted.by_group)
    if not allocated.get("CPU") and window.ended > window.running_from:  # it ran: never 0 % for its work
        read = reads.tasks is not None and reads.actors is not None
        missing["allocated_cpu"] = (
            DRIVER_NOT_COUNTED if read else "the job's tasks or actors could not be read"
        )
    if request.teardown_note:
        missing["teardown"] = request.teardown_note
    prices = parse_prices(request.prices)
    top = sorted(counted.cpu_s_by_function.items(), key=lambda kv: -kv[1])[:20]  # the 20 largest
    record = {
        "submission_id": request.submission_id,
        "ray_job_id": job.get("job_id"),
        "cluster": request.cluster,
        "mode": request.mode,
        "basis": basis,
        "phases": window.phases(),
        "reserved": total(reserved),
        "allocated": allocated,
        "counts": {"tasks": counted.tasks, "actors": counted.actors},
        "cost": cost(prices, reserved) if prices is not None else None,
        "not_available": missing,
        "job_status": job.get("status"),
        "ended_by": request.ended_by,
        "times": window.times(),
        "allocated_cpu_s_by_function": {name: round(held, 3) for name, held in top},
        "schema": SCHEMA,
    }
    return {**record, "utilisation": utilisation(record)}

"""The usage record of one Ray job, computed from what the dashboard said (pure: no I/O).

* **reserved**: what the job held. On the task's own cluster, every node's resources times the part of
  the task's window (cluster wait start, else the job's submission, to the job's end) the node was up;
  on a shared cluster (standing, or reached through a ``ray`` connection), only the job's own
  requests: the entrypoint's reservation over the job's run plus what its tasks and actors were allocated.
* **allocated**: each task attempt's resource request times its run time (state API ``/api/v0/tasks``),
  each actor's lifetime request times its life (``/logical/actors``), and the entrypoint's reservation.

Hours throughout: ``CPU`` in CPU-hours, ``GPU`` in GPU-hours, ``memory_gib`` in GiB-hours.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from itertools import pairwise
from typing import Any

from airflow_ray_provider.launch.usage.prices import MEMORY, Prices, resource_name

#: The record's schema; readers check it.
SCHEMA = "airflow-ray-usage/2"
#: KubeRay's node label naming a node's worker group.
GROUP_LABEL = "ray.io/node-group"
HEAD_GROUP = "headgroup"
#: A placement group's resource name: ``CPU_group_<bundle>_<pg id>`` or ``CPU_group_<pg id>``.
_PG_RESOURCE = re.compile(r"^(?P<base>.+?)_group_(?:\d+_)?[0-9a-f]{16,}$")
_GIB = 1024.0**3


def record_resources(requests: Mapping[str, Any] | None) -> dict[str, float]:
    """A Ray resource request in the record's names and units (memory in GiB; placement-group names
    folded into their base resource; bookkeeping resources dropped)."""
    out: dict[str, float] = {}
    for raw, amount in (requests or {}).items():
        match = _PG_RESOURCE.match(raw)
        name = resource_name(match.group("base") if match else raw)
        if name is None or not isinstance(amount, int | float) or amount <= 0:
            continue
        value = float(amount) / _GIB if name == MEMORY else float(amount)
        out[name] = out.get(name, 0.0) + value
    return out


def _add(total: dict[str, float], resources: Mapping[str, float], hours: float) -> None:
    for name, amount in resources.items():
        total[name] = total.get(name, 0.0) + amount * hours


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
        labels = row.get("labels") or {}
        group = labels.get(GROUP_LABEL) or (HEAD_GROUP if row.get("is_head_node") else "default")
        start, end = row.get("start_time_ms") or 0, row.get("end_time_ms") or 0
        return cls(
            str(row.get("node_id")),
            str(group),
            record_resources(row.get("resources_total")),
            start / 1000.0 if start else None,
            end / 1000.0 if end else None,
        )


def cluster_resources(nodes: Iterable[Node]) -> tuple[set[str], dict[str, set[str]]]:
    """The resources of the cluster and of each worker group that has nodes (to check prices against)."""
    every: set[str] = set()
    groups: dict[str, set[str]] = {}
    for node in nodes:
        every |= set(node.resources)
        groups.setdefault(node.group, set()).update(node.resources)
    return every, groups


@dataclass(frozen=True)
class Window:
    """The times of one job, in seconds since the epoch.

    :param submitted: the job's submission (Job API ``start_time``).
    :param driver_started: the job's supervisor started (the driver runs from then on), if known.
    :param ended: the job's end (Job API ``end_time``; the collection time while it runs).
    :param task_started: the task began waiting for its own cluster (one-task mode; RayJob mode: the
        RayJob's ``status.startTime``, when KubeRay began making its cluster), if it did.
    :param cluster_ready: that cluster answered (RayJob mode: the first look that found its head ready
        after one that did not), if seen; without it the wait ends at the submission.
    """

    submitted: float
    ended: float
    driver_started: float | None = None
    task_started: float | None = None
    cluster_ready: float | None = None

    @property
    def running_from(self) -> float:
        """When the driver ran (its supervisor's start, else the submission)."""
        return self.driver_started or self.submitted

    @property
    def held_from(self) -> float:
        """When the task began to hold its cluster."""
        return self.task_started or self.submitted

    def phases(self) -> dict[str, float | None]:
        """Seconds per phase; ``None`` where it does not apply or was not seen."""
        ready = self.cluster_ready or self.submitted
        waiting = max(0.0, ready - self.task_started) if self.task_started else None
        queued = self.driver_started - self.submitted if self.driver_started else None
        return {
            "waiting_for_cluster_s": _round(waiting),
            "queued_s": _round(queued),
            "running_s": _round(max(0.0, self.ended - self.running_from)),
            "teardown_s": None,
        }

    def times(self) -> dict[str, float | None]:
        """The window's instants (seconds since the epoch), for readers that line records up."""
        return {
            "task_started": _round(self.task_started),
            "cluster_ready": _round(self.cluster_ready),
            "submitted": _round(self.submitted),
            "driver_started": _round(self.driver_started),
            "ended": _round(self.ended),
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _overlap(start: float | None, end: float | None, lo: float, hi: float) -> float:
    return max(0.0, min(end or hi, hi) - max(start or lo, lo))


def reserved_by_group(nodes: Iterable[Node], window: Window) -> dict[str, dict[str, float]]:
    """Resource-hours of each worker group's nodes over the task's window (the task's own cluster)."""
    out: dict[str, dict[str, float]] = {}
    for node in nodes:
        hours = _overlap(node.start, node.end, window.held_from, window.ended) / 3600.0
        _add(out.setdefault(node.group, {}), node.resources, hours)
    return out


@dataclass
class Allocation:
    """What the job's tasks, actors and entrypoint were allocated, in resource-hours per worker group."""

    by_group: dict[str, dict[str, float]] = field(default_factory=dict)
    tasks: int = 0
    actors: int = 0
    #: Ended task attempts with neither a start event nor a ``task:execute`` span nor the owner's
    #: ``SUBMITTED_TO_WORKER`` event: in no figure.
    startless: int = 0
    #: Ended task attempts whose worker's events were lost, timed by the owner's own events
    #: (:func:`owner_seconds`: an upper bound).
    timed_by_owner: int = 0
    #: CPU-seconds per task function / actor class (``entrypoint`` for the entrypoint's reservation).
    cpu_s_by_function: dict[str, float] = field(default_factory=dict)

    def add(self, group: str, resources: Mapping[str, float], seconds: float, name: str = "") -> None:
        """Count ``resources`` held for ``seconds`` on a node of ``group`` (by ``name``, its function)."""
        _add(self.by_group.setdefault(group, {}), resources, max(0.0, seconds) / 3600.0)
        if resources.get("CPU") and name:
            held = resources["CPU"] * max(0.0, seconds)
            self.cpu_s_by_function[name] = self.cpu_s_by_function.get(name, 0.0) + held

    def top_functions(self, limit: int = 20) -> dict[str, float]:
        """The ``limit`` functions that held the most CPU-seconds, largest first."""
        ranked = sorted(self.cpu_s_by_function.items(), key=lambda kv: -kv[1])[:limit]
        return {name: round(held, 3) for name, held in ranked}


def execute_spans(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A task attempt's ended ``task:execute`` profiling spans (the function's own run)."""
    events = ((task.get("profiling_data") or {}).get("events")) or []
    return [e for e in events if e.get("event_name") == "task:execute" and e.get("end_time")]


def task_seconds(task: Mapping[str, Any], job_end: float, next_start: float | None = None) -> float:
    """How long one task attempt ran: Ray's ``task:execute`` span where its profile has one (the
    function's run, without the worker's argument loading), else ``RUNNING`` to its end; an attempt
    whose end event never came ends where its worker began its next attempt (``next_start``: a worker
    runs one normal task at a time), else at the job's end."""
    spans = execute_spans(task)
    if spans:
        return sum(float(e["end_time"]) - float(e["start_time"]) for e in spans) / 1000.0
    if task.get("end_time_ms"):
        end = float(task["end_time_ms"]) / 1000.0
    else:
        end = min(next_start, job_end) if next_start is not None else job_end
    return end - float(task["start_time_ms"]) / 1000.0


def owner_seconds(task: Mapping[str, Any]) -> float | None:
    """How long an ended attempt whose worker's events were lost (no ``RUNNING`` start, no
    ``task:execute`` span) held its worker, by its owner's events: from ``SUBMITTED_TO_WORKER`` (the task
    pushed to its leased worker) to its end (the owner got the reply). An upper bound by the push's round
    trip and the argument fetch; ``None`` without both events."""
    submitted = [
        float(event["created_ms"])
        for event in task.get("events") or []
        if event.get("state") == "SUBMITTED_TO_WORKER" and event.get("created_ms")
    ]
    if not submitted or not task.get("end_time_ms"):
        return None
    return max(0.0, float(task["end_time_ms"]) - max(submitted)) / 1000.0


def next_starts(tasks: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """For each normal task attempt (by ``id()`` of its row), when its worker began its next attempt."""
    by_worker: dict[str, list[Mapping[str, Any]]] = {}
    for task in tasks:
        worker = task.get("worker_id")
        if worker and task.get("start_time_ms") and task.get("type") in (None, "NORMAL_TASK"):
            by_worker.setdefault(str(worker), []).append(task)
    out: dict[int, float] = {}
    for rows in by_worker.values():
        rows.sort(key=lambda row: float(row["start_time_ms"]))
        for row, after in pairwise(rows):
            out[id(row)] = float(after["start_time_ms"]) / 1000.0
    return out


def allocation(
    *,
    tasks: Iterable[Mapping[str, Any]],
    actors: Iterable[Mapping[str, Any]],
    entrypoint: Mapping[str, float],
    window: Window,
    node_groups: Mapping[str, str],
    driver_group: str = HEAD_GROUP,
) -> Allocation:
    """Resource-hours the job was allocated.

    :param tasks: rows of ``/api/v0/tasks?detail=true`` for the job (normal tasks count, for
        :func:`task_seconds`; an actor's tasks run inside its lifetime allocation and its creation task is
        the actor itself).
    :param actors: the job's actors from ``/logical/actors`` (``startTime``/``endTime`` in ms, lifetime
        ``requiredResources``); an actor still alive counts to the job's end.
    :param entrypoint: the entrypoint's reservation (record names), held while the driver ran.
    :param window: the job's times.
    :param node_groups: node id -> worker group.
    :param driver_group: the worker group the driver ran on.
    """
    out = Allocation()
    out.add(driver_group, entrypoint, window.ended - window.running_from, "entrypoint")
    tasks = list(tasks)
    following = next_starts(tasks)
    for task in tasks:
        if task.get("type") not in (None, "NORMAL_TASK"):
            continue
        if task.get("start_time_ms") or execute_spans(task):
            seconds = task_seconds(task, window.ended, following.get(id(task)))
        else:  # never ran, or ran and its worker's events were lost (the owner's states are kept)
            by_owner = owner_seconds(task)
            if by_owner is None:
                out.startless += int(bool(task.get("end_time_ms")))
                continue
            seconds = by_owner
            out.timed_by_owner += 1
        group = node_groups.get(str(task.get("node_id")), "default")
        name = str(task.get("func_or_class_name") or task.get("name") or "task")
        out.add(group, record_resources(task.get("required_resources")), seconds, name)
        out.tasks += 1
    for actor in actors:
        if not actor.get("startTime"):
            continue
        end = (actor.get("endTime") or window.ended * 1000.0) / 1000.0
        node = (actor.get("address") or {}).get("nodeId")
        resources = record_resources(actor.get("requiredResources"))
        seconds, name = end - actor["startTime"] / 1000.0, str(actor.get("className") or "actor")
        out.add(node_groups.get(str(node), "default"), resources, seconds, name)
        out.actors += 1
    return out


def total(by_group: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Resource-hours summed over the worker groups."""
    out: dict[str, float] = {}
    for table in by_group.values():
        _add(out, table, 1.0)
    return out


def cost(prices: Prices, by_group: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The estimate: each group's resource-hours at that group's prices (unpriced resources cost 0)."""
    by_resource: dict[str, float] = {}
    for group, table in by_group.items():
        rates = prices.for_group(group)
        for name, hours in table.items():
            if name in rates:
                by_resource[name] = by_resource.get(name, 0.0) + hours * rates[name]
    amount = sum(by_resource.values())
    return {
        "amount": round(amount, 6),
        "currency": prices.currency,
        "by_resource": {k: round(v, 6) for k, v in sorted(by_resource.items())},
        "prices": prices.to_dict(),
    }


def _hours(table: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in sorted(table.items())}


def _share(part: float | None, whole: float) -> float | None:
    return round(part / whole, 4) if part is not None and whole > 0 else None


def _figure(value: float) -> str:
    """Two significant digits, never in exponent notation (``3.2``, ``0.0031``, ``12``)."""
    if value >= 10 or value <= 0:
        return f"{value:.0f}"
    return f"{value:.{max(1, 1 - math.floor(math.log10(value)))}f}"


@dataclass
class UsageRecord:
    """What one job reserved, was allocated and (with prices) cost.

    :param submission_id: the job's submission id.
    :param ray_job_id: Ray's job id (``02000000``), when the Job API named it.
    :param cluster: the cluster's name (or dashboard URL).
    :param mode: how the job ran (``ephemeral``, ``standing``, ``one_task``, ``task_ray``, ``rayjob``).
    :param basis: ``cluster`` (the task's own cluster) or ``job requests`` (a shared cluster).
    :param phases: seconds per phase.
    :param reserved: resource-hours reserved.
    :param allocated: resource-hours allocated to tasks, actors and the entrypoint.
    :param counts: tasks and actors counted.
    :param cost: the estimate, ``None`` without prices.
    :param not_available: what could not be read, and why.
    :param job_status: Ray's status of the job when the record was made (``SUCCEEDED``, ``FAILED``,
        ``STOPPED``; ``RUNNING`` for a job the task left running).
    :param ended_by: why the task stopped waiting: ``finished`` (the job ended by itself), ``timed_out``
        (``job_timeout``), ``killed`` (a kill of the task).
    :param times: the window's instants (seconds since the epoch).
    :param allocated_cpu_s_by_function: allocated CPU-seconds per task function and actor class
        (``entrypoint``: the entrypoint's reservation); the 20 largest.
    """

    submission_id: str
    ray_job_id: str | None
    cluster: str
    mode: str
    basis: str
    phases: dict[str, float | None]
    reserved: dict[str, float]
    allocated: dict[str, float]
    counts: dict[str, int]
    cost: dict[str, Any] | None = None
    not_available: dict[str, str] = field(default_factory=dict)
    job_status: str | None = None
    ended_by: str = "finished"
    times: dict[str, float | None] = field(default_factory=dict)
    allocated_cpu_s_by_function: dict[str, float] = field(default_factory=dict)
    schema: str = SCHEMA

    @property
    def utilisation(self) -> dict[str, float | None]:
        """Allocated CPU as a share of reserved CPU (and allocated GPU of reserved GPU)."""
        cpu, gpu = self.reserved.get("CPU", 0.0), self.reserved.get("GPU", 0.0)
        return {
            "allocated_cpu": _share(self.allocated.get("CPU", 0.0), cpu),
            "allocated_gpu": _share(self.allocated.get("GPU", 0.0), gpu),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageRecord:
        """The record of a :meth:`to_dict` (derived keys such as ``utilisation`` are left out)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (XCom, ``usage.json``)."""
        data = asdict(self)
        data["utilisation"] = self.utilisation
        return data

    def line(self) -> str:
        """``reserved 3.2 CPU-h, allocated 2.6 (81 %), ~$0.13`` (GPU-hours when any)."""
        share = self.utilisation
        parts = [f"reserved {_figure(self.reserved.get('CPU', 0.0))} CPU-h"]
        if self.ended_by != "finished":
            parts[0] = (
                f"[job {self.ended_by.replace('_', ' ')}, {self.job_status or 'status unknown'}] " + parts[0]
            )
        if self.reserved.get("GPU"):
            parts[0] += f" + {_figure(self.reserved['GPU'])} GPU-h"
        allocated = f"allocated {_figure(self.allocated.get('CPU', 0.0))}"
        if share["allocated_cpu"] is not None:
            allocated += f" ({share['allocated_cpu'] * 100:.0f} %)"
        if self.allocated.get("GPU"):
            allocated += f" + {_figure(self.allocated['GPU'])} GPU-h"
        parts.append(allocated)
        if self.cost is not None:
            parts.append(Prices(currency=self.cost["currency"]).format(self.cost["amount"]))
        return ", ".join(parts)


def with_teardown(data: dict[str, Any], gone_at: float) -> dict[str, Any]:
    """A record's dict with ``phases.teardown_s``: from the job's end to ``gone_at`` (the cluster gone)."""
    ended = (data.get("times") or {}).get("ended")
    if not ended:
        return data
    phases = {**data.get("phases", {}), "teardown_s": _round(max(0.0, gone_at - ended))}
    missing = {k: v for k, v in (data.get("not_available") or {}).items() if k != "teardown"}
    return {**data, "phases": phases, "not_available": missing}


def build_record(
    *,
    submission_id: str,
    ray_job_id: str | None,
    cluster: str,
    mode: str,
    own_cluster: bool,
    window: Window,
    nodes: list[Node] | None,
    allocated: Allocation | None,
    prices: Prices | None,
    not_available: dict[str, str],
    job_status: str | None = None,
    ended_by: str = "finished",
) -> UsageRecord:
    """Put the figures together; what could not be read stays out (and is named in ``not_available``)."""
    missing = dict(not_available)
    alloc = allocated or Allocation()
    if own_cluster and nodes is not None:
        basis, reserved_groups = "cluster", reserved_by_group(nodes, window)
    else:
        if own_cluster:
            missing.setdefault(
                "reserved", "the cluster's nodes could not be read: reserved is the job's requests"
            )
        basis, reserved_groups = "job requests", alloc.by_group
    return UsageRecord(
        submission_id=submission_id,
        ray_job_id=ray_job_id,
        cluster=cluster,
        mode=mode,
        basis=basis,
        phases=window.phases(),
        reserved=_hours(total(reserved_groups)),
        allocated=_hours(total(alloc.by_group)),
        counts={"tasks": alloc.tasks, "actors": alloc.actors},
        cost=cost(prices, reserved_groups) if prices is not None else None,
        not_available=missing,
        job_status=job_status,
        ended_by=ended_by,
        times=window.times(),
        allocated_cpu_s_by_function=alloc.top_functions(),
    )

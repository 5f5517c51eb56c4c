"""The usage record of one Ray job (docs/usage.md): pure, state API rows in, resource-hours out, and its
price tables (checked before submit, applied after the end). Ray's task events are lossy: the rules
below time an attempt with missing events, and count those they could not time.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError

#: The record's schema; readers check it.
SCHEMA = "airflow-ray-usage/2"
#: KubeRay's node label naming a node's worker group.
GROUP_LABEL = "ray.io/node-group"
HEAD_GROUP = "headgroup"
#: A placement group's resource name: ``CPU_group_<bundle>_<pg id>`` or ``CPU_group_<pg id>``.
_PG_RESOURCE = re.compile(r"^(?P<base>.+?)_group_(?:\d+_)?[0-9a-f]{16,}$")
_GIB = 1024.0**3
#: The record's name for Ray's ``memory`` resource (bytes there, GiB here).
MEMORY = "memory_gib"
_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}
#: Why allocated CPU is ``n/a`` for a job that ran while nothing in Ray's accounting held CPU: the driver
#: runs in the job's supervisor process, which reserves nothing unless the entrypoint asks.
DRIVER_NOT_COUNTED = (
    "the driver reserves no Ray resources: its work is not counted; set entrypoint_num_cpus to count it"
)


def resource_name(ray_name: str) -> str | None:
    """The record's name of a Ray resource: ``memory`` -> ``memory_gib``; ``None`` for bookkeeping ones
    (``node:<ip>``, ``object_store_memory``, accelerator-type markers) that are never priced."""
    if ray_name.startswith(("node:", "accelerator_type:")) or ray_name == "object_store_memory":
        return None
    return MEMORY if ray_name == "memory" else ray_name


@dataclass(frozen=True)
class Prices:
    """A checked price table: ``default`` for every node, ``groups`` overriding it per worker group;
    ``source`` names where it came from, for messages."""

    default: dict[str, float] = field(default_factory=dict)
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    currency: str = "USD"
    source: str = "prices"

    def to_dict(self) -> dict[str, Any]:
        """The table as given (for the record)."""
        return {
            **self.default,
            "currency": self.currency,
            "groups": {g: dict(t) for g, t in self.groups.items()},
        }


def _table(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise RayInvalidInputError(f"{where} must be a mapping of resource name to price, got {value!r}")
    for name, price in value.items():
        if not isinstance(name, str) or not name or name == "memory" or resource_name(name) is None:
            hint = " (price Ray's memory as memory_gib, per GiB-hour)" if name == "memory" else ""
            raise RayInvalidInputError(f"{where} has a bad resource name {name!r}{hint}")
        if isinstance(price, bool) or not isinstance(price, int | float) or not 0 < price < math.inf:
            raise RayInvalidInputError(
                f"{where}[{name!r}] must be a positive number (a price per resource-hour), got {price!r}"
            )
    return {name: float(price) for name, price in value.items()}


def parse_prices(value: Any, *, source: str = "prices") -> Prices | None:
    """Check a price table's shape and numbers before anything starts (:class:`RayInvalidInputError` naming
    the field of ``source``, e.g. ``"connection 'ray_default' extra 'prices'"``); ``None``: no prices."""
    if value is None or isinstance(value, Prices):
        return value
    if not isinstance(value, Mapping):
        raise RayInvalidInputError(f"{source} must be a mapping such as {{'CPU': 0.05}}, got {value!r}")
    rest = dict(value)
    currency = rest.pop("currency", "USD")
    if not isinstance(currency, str) or not currency.strip():
        raise RayInvalidInputError(
            f"{source}['currency'] must be a currency code such as 'USD', got {currency!r}"
        )
    groups = rest.pop("groups", {}) or {}
    if not isinstance(groups, Mapping):
        raise RayInvalidInputError(f"{source}['groups'] must map worker-group names to price tables")
    by_group = {str(g): _table(t, f"{source}['groups'][{g!r}]") for g, t in groups.items()}
    prices = Prices(_table(rest, source), by_group, currency.strip().upper(), source)
    if not prices.default and not any(prices.groups.values()):
        raise RayInvalidInputError(f"{source} names no resource to price; e.g. {{'CPU': 0.05}}")
    return prices


def check_against_cluster(prices: Prices, groups: Mapping[str, Iterable[str]]) -> None:
    """Refuse a price for a resource the cluster lacks (``groups``: each worker group's resources now; a
    group without nodes yet, e.g. autoscaled, keeps its own prices unchecked)."""
    checks = [(prices.source, prices.default, set().union(*groups.values()), "the cluster")]
    checks += [(f"{prices.source}['groups'][{group!r}]", table, set(groups[group]), f"worker group {group!r}")
               for group, table in prices.groups.items() if groups.get(group)]  # fmt: skip
    for where, table, have, whose in checks:
        if lacking := sorted(set(table) - have):
            raise RayInvalidInputError(
                f"{where} prices {lacking}, which {whose} does not have (it has {sorted(have)}); "
                "drop those prices or fix their names"
            )


def record_resources(requests: Mapping[str, Any] | None) -> dict[str, float]:
    """A Ray resource request in the record's names and units (memory in GiB; placement-group names
    folded into their base resource; bookkeeping resources dropped)."""
    out: dict[str, float] = {}
    for raw, amount in (requests or {}).items():
        match = _PG_RESOURCE.match(raw)
        name = resource_name(match.group("base") if match else raw)
        if name is not None and isinstance(amount, int | float) and amount > 0:
            out[name] = out.get(name, 0.0) + (float(amount) / _GIB if name == MEMORY else float(amount))
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


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
    """What the record of a run's job is asked with (JSON-safe: it travels to a trigger as its
    ``dataclasses.asdict``): the operator's options (``own_cluster``: reserved is the whole cluster;
    ``entrypoint``: its reservation in Ray names; ``prices``: ``Prices.to_dict()``; ``teardown_note``: why
    ``phases.teardown_s`` stays out), then what the run knows that the dashboard does not."""

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


@dataclass(frozen=True)
class Window:
    """The times of one job, in seconds since the epoch (docs/usage.md, ``times``); ``None``: not seen or
    not applicable."""

    submitted: float
    ended: float
    driver_started: float | None = None
    task_started: float | None = None
    cluster_ready: float | None = None

    @property
    def running_from(self) -> float:
        """When the driver ran (its supervisor's start, else the submission)."""
        return self.driver_started or self.submitted

    def phases(self) -> dict[str, float | None]:
        """Seconds per phase; ``None`` where it does not apply or was not seen."""
        ready = self.cluster_ready or self.submitted
        waiting = max(0.0, ready - self.task_started) if self.task_started else None
        return {
            "waiting_for_cluster_s": _round(waiting),
            "queued_s": _round(self.driver_started - self.submitted) if self.driver_started else None,
            "running_s": _round(max(0.0, self.ended - self.running_from)),
            "teardown_s": None,
        }

    def times(self) -> dict[str, float | None]:
        """The window's instants, for readers that line records up."""
        return {name: _round(value) for name, value in asdict(self).items()}


@dataclass
class Allocation:
    """Resource-hours per worker group, CPU-seconds per task function / actor class, and the attempts the
    rules could not time as Ray meant (``untimed``, by their :data:`TASK_NOTES` key)."""

    by_group: dict[str, dict[str, float]] = field(default_factory=dict)
    tasks: int = 0
    actors: int = 0
    untimed: Counter[str] = field(default_factory=Counter)
    cpu_s_by_function: dict[str, float] = field(default_factory=dict)

    def add(self, group: str, resources: Mapping[str, float], seconds: float, name: str = "") -> None:
        """Count ``resources`` held for ``seconds`` on a node of ``group`` (by ``name``, its function)."""
        table = self.by_group.setdefault(group, {})
        for resource, amount in resources.items():
            table[resource] = table.get(resource, 0.0) + amount * max(0.0, seconds) / 3600.0
        if resources.get("CPU") and name:
            held = resources["CPU"] * max(0.0, seconds)
            self.cpu_s_by_function[name] = self.cpu_s_by_function.get(name, 0.0) + held


def execute_spans(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A task attempt's ended ``task:execute`` profiling spans (the function's own run)."""
    events = ((task.get("profiling_data") or {}).get("events")) or []
    return [e for e in events if e.get("event_name") == "task:execute" and e.get("end_time")]


def task_seconds(task: Mapping[str, Any], job_end: float, next_start: float | None = None) -> float:
    """How long one attempt ran: its ``task:execute`` spans (without the worker's argument loading),
    else ``RUNNING`` to its end, else to its worker's next attempt (``next_start``: a worker runs one
    normal task at a time), else to the job's end."""
    spans = execute_spans(task)
    if spans:
        return sum(float(e["end_time"]) - float(e["start_time"]) for e in spans) / 1000.0
    if task.get("end_time_ms"):
        end = float(task["end_time_ms"]) / 1000.0
    else:
        end = min(next_start, job_end) if next_start is not None else job_end
    return end - float(task["start_time_ms"]) / 1000.0


def allocation(
    *,
    tasks: Iterable[Mapping[str, Any]],
    actors: Iterable[Mapping[str, Any]],
    entrypoint: Mapping[str, float],
    window: Window,
    node_groups: Mapping[str, str],
    driver_group: str = HEAD_GROUP,
) -> Allocation:
    """Resource-hours the job was allocated (docs/usage.md, ``allocated``): its normal task attempts, its
    actors (``/logical/actors`` rows) and the entrypoint's reservation while the driver ran."""
    out = Allocation()
    out.add(driver_group, entrypoint, window.ended - window.running_from, "entrypoint")
    tasks = [task for task in tasks if task.get("type") in (None, "NORMAL_TASK")]
    by_worker: dict[str, list[Mapping[str, Any]]] = {}
    for task in tasks:
        if task.get("worker_id") and task.get("start_time_ms"):
            by_worker.setdefault(str(task["worker_id"]), []).append(task)
    following: dict[int, float] = {}  # by id() of an attempt's row: when its worker began its next one
    for rows in by_worker.values():
        rows.sort(key=lambda row: float(row["start_time_ms"]))
        following.update((id(row), float(after["start_time_ms"]) / 1000.0) for row, after in pairwise(rows))
    for task in tasks:
        if task.get("start_time_ms") or execute_spans(task):
            seconds = task_seconds(task, window.ended, following.get(id(task)))
            settled = task.get("end_time_ms") and execute_spans(task)
            out.untimed["tasks_unsettled"] += int(bool(task.get("start_time_ms")) and not settled)
        else:  # never ran, or its worker's events were lost: from the owner's SUBMITTED_TO_WORKER to its end
            events = [e for e in task.get("events") or [] if e.get("state") == "SUBMITTED_TO_WORKER"]
            sent = [float(e["created_ms"]) for e in events if e.get("created_ms")]
            if not sent or not task.get("end_time_ms"):
                out.untimed["tasks_without_start"] += int(bool(task.get("end_time_ms")))
                continue
            seconds = max(0.0, float(task["end_time_ms"]) - max(sent)) / 1000.0
            out.untimed["tasks_timed_by_owner"] += 1
        group = node_groups.get(str(task.get("node_id")), "default")
        name = str(task.get("func_or_class_name") or task.get("name") or "task")
        out.add(group, record_resources(task.get("required_resources")), seconds, name)
        out.tasks += 1
    for actor in actors:
        if actor.get("startTime"):
            end = (actor.get("endTime") or window.ended * 1000.0) / 1000.0
            group = node_groups.get(str((actor.get("address") or {}).get("nodeId")), "default")
            seconds, name = end - actor["startTime"] / 1000.0, str(actor.get("className") or "actor")
            out.add(group, record_resources(actor.get("requiredResources")), seconds, name)
            out.actors += 1
    return out


def total(by_group: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Resource-hours summed over the worker groups, rounded for the record."""
    out: Counter[str] = Counter()
    for table in by_group.values():
        out.update(table)
    return {k: round(v, 6) for k, v in sorted(out.items())}


def cost(prices: Prices, by_group: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The estimate: each group's resource-hours at that group's prices (unpriced resources cost 0)."""
    by_resource: dict[str, float] = {}
    for group, table in by_group.items():
        rates = {**prices.default, **prices.groups.get(group, {})}
        for name, hours in table.items():
            if name in rates:
                by_resource[name] = by_resource.get(name, 0.0) + hours * rates[name]
    return {
        "amount": round(sum(by_resource.values()), 6),
        "currency": prices.currency,
        "by_resource": {k: round(v, 6) for k, v in sorted(by_resource.items())},
        "prices": prices.to_dict(),
    }


def _figure(value: float) -> str:
    """Two significant digits, never in exponent notation (``3.2``, ``0.0031``, ``12``)."""
    if value >= 10 or value <= 0:
        return f"{value:.0f}"
    return f"{value:.{max(1, 1 - math.floor(math.log10(value)))}f}"


def usage_line(data: Mapping[str, Any]) -> str:
    """A record's log line: ``reserved 3.2 CPU-h, allocated 2.6 (81 %), ~$0.13`` (GPU-hours when any;
    ``allocated n/a (why)`` where Ray's accounting did not count the job's work)."""
    reserved, allocated = data.get("reserved") or {}, data.get("allocated") or {}
    share, why_na = data["utilisation"]["allocated_cpu"], data["not_available"].get("allocated_cpu")
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
    if cost := data.get("cost"):
        amount, symbol = cost["amount"], _SYMBOLS.get(cost["currency"])
        text = f"{amount:.2f}" if amount >= 0.01 else f"{amount:.2g}"
        line += f", ~{symbol}{text}" if symbol else f", ~{text} {cost['currency']}"
    return line


#: What the record says (``not_available``) about task attempts whose events Ray did not deliver, by their
#: key in ``Allocation.untimed`` (``tasks_unsettled``: none once the Job API reports the end).
TASK_NOTES = {
    "tasks_unsettled": "task attempt(s) had no end or no task:execute span (Ray did not deliver them): "
    "counted from their start to their end, else to their worker's next task attempt, else to the job's end",
    "tasks_timed_by_owner": "ended task attempt(s) had neither a start event nor a task:execute span "
    "(Ray lost their worker's events): counted from their owner's SUBMITTED_TO_WORKER to their end, "
    "an upper bound",
    "tasks_without_start": "ended task attempt(s) had neither a start event, a task:execute span nor their "
    "owner's SUBMITTED_TO_WORKER (Ray lost them): not counted",
}


def make_record(
    request: UsageOptions,
    *,
    now: float,
    job: dict[str, Any] | None = None,
    nodes: list[Node] | None = None,
    tasks: list[dict[str, Any]] | None = None,
    actors: list[dict[str, Any]] | None = None,
    supervisor: dict[str, Any] | None = None,
    missing: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The job's record (docs/usage.md) from what the dashboard told: ``None`` where a read failed, and
    ``missing`` says why; ``now`` is the collection time (the end of a job that has not ended)."""
    job, missing = job or {}, dict(missing or {})
    submitted, ended = ((job.get(key) or now * 1000.0) / 1000.0 for key in ("start_time", "end_time"))
    driver_started = (supervisor or {}).get("startTime", 0) / 1000.0 or None
    window = Window(submitted, ended, driver_started, request.task_started, request.cluster_ready)
    groups = {node.node_id: node.group for node in nodes or []}
    counted = Allocation()
    if tasks is not None or actors is not None:
        driver_group = groups.get(str(job.get("driver_node_id") or ""), HEAD_GROUP)
        counted = allocation(tasks=tasks or [], actors=actors or [], window=window,
                             entrypoint=record_resources(request.entrypoint), node_groups=groups,
                             driver_group=driver_group)  # fmt: skip
    if not job.get("end_time"):  # a job that has not ended has attempts still running
        counted.untimed["tasks_unsettled"] = 0
    missing.update(
        {key: f"{counted.untimed[key]} {text}" for key, text in TASK_NOTES.items() if counted.untimed[key]}
    )
    basis, reserved = "job requests", counted.by_group
    if request.own_cluster and nodes is not None:  # its own cluster's nodes over the task's window
        basis, cluster, since = "cluster", Allocation(), window.task_started or submitted
        for node in nodes:
            up = min(node.end or math.inf, window.ended) - max(node.start or 0.0, since)
            cluster.add(node.group, node.resources, up)
        reserved = cluster.by_group
    elif request.own_cluster:
        missing.setdefault(
            "reserved", "the cluster's nodes could not be read: reserved is the job's requests"
        )
    allocated = total(counted.by_group)
    if not allocated.get("CPU") and window.ended > window.running_from:  # it ran: never 0 % for its work
        read = tasks is not None and actors is not None
        missing["allocated_cpu"] = (
            DRIVER_NOT_COUNTED if read else "the job's tasks or actors could not be read"
        )
    if request.teardown_note:
        missing["teardown"] = request.teardown_note
    prices = parse_prices(request.prices)
    top = sorted(counted.cpu_s_by_function.items(), key=lambda kv: -kv[1])[:20]  # the 20 largest
    held = total(reserved)
    share = {key: round(allocated.get(name, 0.0) / held[name], 4) if held.get(name) and key not in missing
             else None for name, key in (("CPU", "allocated_cpu"), ("GPU", "allocated_gpu"))}  # fmt: skip
    return {
        "submission_id": request.submission_id,
        "ray_job_id": job.get("job_id"),
        "cluster": request.cluster,
        "mode": request.mode,
        "basis": basis,
        "phases": window.phases(),
        "reserved": held,
        "allocated": allocated,
        "counts": {"tasks": counted.tasks, "actors": counted.actors},
        "cost": cost(prices, reserved) if prices is not None else None,
        "not_available": missing,
        "job_status": job.get("status"),
        "ended_by": request.ended_by,
        "times": window.times(),
        "allocated_cpu_s_by_function": {name: round(held, 3) for name, held in top},
        "schema": SCHEMA,
        "utilisation": share,
    }

"""What a job's work held, in Ray's own accounting (pure: state API rows in, resource-hours out).

Each normal task attempt's resource request times its run (Ray's ``task:execute`` span, else ``RUNNING``
to its end), each actor's lifetime request times its life, and the entrypoint's reservation times the
driver's run. Ray's task events are lossy, so the rules below say how an attempt with missing events
is timed, and count the attempts they could not time. Hours throughout: ``CPU`` in CPU-hours, ``GPU``
in GPU-hours, ``memory_gib`` in GiB-hours.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from airflow_ray_provider.launch.usage.prices import MEMORY, resource_name

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


def add_hours(total: dict[str, float], resources: Mapping[str, float], hours: float) -> None:
    """Add ``resources`` held for ``hours`` to ``total`` (resource-hours)."""
    for name, amount in resources.items():
        total[name] = total.get(name, 0.0) + amount * hours


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class Window:
    """The times of one job, in seconds since the epoch.

    :param submitted: the job's submission (Job API ``start_time``).
    :param ended: the job's end (Job API ``end_time``; the collection time while it runs).
    :param driver_started: the job's supervisor started (the driver runs from then on), if known.
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

    def phases(self) -> dict[str, float | None]:
        """Seconds per phase; ``None`` where it does not apply or was not seen."""
        ready = self.cluster_ready or self.submitted
        return {
            "waiting_for_cluster_s": _round(max(0.0, ready - self.task_started))
            if self.task_started
            else None,
            "queued_s": _round(self.driver_started - self.submitted) if self.driver_started else None,
            "running_s": _round(max(0.0, self.ended - self.running_from)),
            "teardown_s": None,
        }

    def times(self) -> dict[str, float | None]:
        """The window's instants (seconds since the epoch), for readers that line records up."""
        names = ("task_started", "cluster_ready", "submitted", "driver_started", "ended")
        return {name: _round(getattr(self, name)) for name in names}


@dataclass
class Allocation:
    """Resource-hours per worker group (what the job's tasks, actors and entrypoint were allocated, or
    what the cluster's nodes held), and the attempts the rules could not time as Ray meant."""

    by_group: dict[str, dict[str, float]] = field(default_factory=dict)
    tasks: int = 0
    actors: int = 0
    #: Ended attempts with neither a start event, a ``task:execute`` span nor the owner's
    #: ``SUBMITTED_TO_WORKER`` event: in no figure.
    startless: int = 0
    #: Ended attempts whose worker's events were lost, timed by :func:`owner_seconds` (an upper bound).
    timed_by_owner: int = 0
    #: Attempts that ran without an end or a ``task:execute`` span (counted to their worker's next
    #: attempt or the job's end). Ray's task events are final once the Job API reports the end.
    unsettled: int = 0
    #: CPU-seconds per task function / actor class (``entrypoint`` for the entrypoint's reservation).
    cpu_s_by_function: dict[str, float] = field(default_factory=dict)

    def add(self, group: str, resources: Mapping[str, float], seconds: float, name: str = "") -> None:
        """Count ``resources`` held for ``seconds`` on a node of ``group`` (by ``name``, its function)."""
        add_hours(self.by_group.setdefault(group, {}), resources, max(0.0, seconds) / 3600.0)
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


def owner_seconds(task: Mapping[str, Any]) -> float | None:
    """How long an ended attempt whose worker's events were lost held its worker, by its owner's events:
    from ``SUBMITTED_TO_WORKER`` (pushed to its leased worker) to its end (the owner got the reply), an
    upper bound; ``None`` without both events."""
    submitted = [
        float(event["created_ms"])
        for event in task.get("events") or []
        if event.get("state") == "SUBMITTED_TO_WORKER" and event.get("created_ms")
    ]
    if not submitted or not task.get("end_time_ms"):
        return None
    return max(0.0, float(task["end_time_ms"]) - max(submitted)) / 1000.0


def next_starts(tasks: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """For each task attempt that started (by ``id()`` of its row), when its worker began its next one."""
    by_worker: dict[str, list[Mapping[str, Any]]] = {}
    for task in tasks:
        if task.get("worker_id") and task.get("start_time_ms"):
            by_worker.setdefault(str(task["worker_id"]), []).append(task)
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

    :param tasks: rows of ``/api/v0/tasks?detail=true`` for the job (normal tasks count: an actor's
        tasks run inside its lifetime allocation, and its creation task is the actor).
    :param actors: the job's actors from ``/logical/actors`` (``startTime``/``endTime`` in ms, lifetime
        ``requiredResources``); an actor still alive counts to the job's end.
    :param entrypoint: the entrypoint's reservation (record names), held while the driver ran.
    :param node_groups: node id -> worker group.
    :param driver_group: the worker group the driver ran on.
    """
    out = Allocation()
    out.add(driver_group, entrypoint, window.ended - window.running_from, "entrypoint")
    tasks = [task for task in tasks if task.get("type") in (None, "NORMAL_TASK")]
    following = next_starts(tasks)
    for task in tasks:
        if task.get("start_time_ms") or execute_spans(task):
            seconds = task_seconds(task, window.ended, following.get(id(task)))
            settled = task.get("end_time_ms") and execute_spans(task)
            out.unsettled += int(bool(task.get("start_time_ms")) and not settled)
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

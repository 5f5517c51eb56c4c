"""Read what the dashboard knows about one finished job and turn it into its :class:`UsageRecord`.

Five reads over the dashboard's HTTP API (:mod:`.state`; the last four at once), with the cluster's token
(``Authorization: Bearer``): the job (``/api/jobs/{id}``), the nodes (``/api/v0/nodes``), the job's
tasks (``/api/v0/tasks`` filtered by its Ray job id), the actors (``/logical/actors``: the one actor
list with start and end times) and the job's actors as the GCS has them (``/api/v0/actors``, to mend
the dashboard's copy: :mod:`.actors`). A read that fails never fails the job: the record leaves that
figure out and says what it could not read. No Airflow imports; no Ray process: plain HTTP from the caller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_ray_provider.launch.usage.actors import find_supervisor, job_actors
from airflow_ray_provider.launch.usage.prices import Prices, check_against_cluster
from airflow_ray_provider.launch.usage.record import (
    HEAD_GROUP,
    UsageRecord,
    Window,
    allocation,
    build_record,
    cluster_resources,
    execute_spans,
    record_resources,
)
from airflow_ray_provider.launch.usage.state import DashboardState, StateUnreadableError

log = logging.getLogger(__name__)


def check_prices_on_cluster(state: DashboardState, prices: Prices) -> str | None:
    """Check a price table against the cluster's resources before submit.

    :returns: ``None`` when checked, else why it could not be (the dashboard did not answer).
    :raises RayInvalidInputError: for a price of a resource the cluster does not have.
    """
    try:
        nodes = state.nodes()
    except StateUnreadableError as exc:
        return str(exc)
    every, groups = cluster_resources(nodes)
    check_against_cluster(prices, every, groups)
    return None


@dataclass(frozen=True)
class UsageRequest:
    """What the caller knows about the job that the dashboard does not.

    :param submission_id: the job.
    :param cluster: the cluster's name.
    :param mode: how it ran (``ephemeral``, ``standing``, ``one_task``, ``task_ray``, ``rayjob``).
    :param own_cluster: the cluster was the task's own (reserved is then the whole cluster).
    :param entrypoint: the entrypoint's reservation (Ray names: ``CPU``, ``GPU``, ``memory`` bytes, ...).
    :param prices: the checked price table, if any.
    :param task_started: when the task began waiting for its own cluster (seconds since the epoch).
    :param cluster_ready: when that cluster answered.
    :param ended_by: why the task stopped waiting (``finished``, ``timed_out``, ``killed``).
    :param teardown_note: why ``phases.teardown_s`` is not in this record (``None``: not applicable,
        or the caller adds it once the cluster is gone, with :func:`with_teardown`).
    """

    submission_id: str
    cluster: str
    mode: str
    own_cluster: bool
    entrypoint: Mapping[str, float] = field(default_factory=dict)
    prices: Prices | None = None
    task_started: float | None = None
    cluster_ready: float | None = None
    ended_by: str = "finished"
    teardown_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe kwargs (a trigger carries them, to make a kill's record in the triggerer)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {
            **data,
            "entrypoint": dict(self.entrypoint),
            "prices": self.prices.to_dict() if self.prices else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **changes: Any) -> UsageRequest:
        """The request of :meth:`to_dict`, with ``changes`` (e.g. ``ended_by="killed"``)."""
        from airflow_ray_provider.launch.usage.prices import parse_prices

        merged = {**data, **changes}
        return cls(**{**merged, "prices": parse_prices(merged.get("prices"))})


def _read(what: str, missing: dict[str, str], read: Callable[[], Any]) -> Any:
    try:
        return read()
    except StateUnreadableError as exc:
        missing[what] = str(exc)
        return None


def unsettled(tasks: list[dict[str, Any]]) -> int:
    """Normal task attempts of an ended job whose events have not all arrived (no end, or no
    ``task:execute`` span although the task ran): the record would count them to the job's end."""
    count = 0
    for task in tasks:
        if task.get("type") not in (None, "NORMAL_TASK") or not task.get("start_time_ms"):
            continue
        count += int(not task.get("end_time_ms") or not execute_spans(task))
    return count


def _note_unsettled(tasks: list[dict[str, Any]], missing: dict[str, str]) -> None:
    """Name the ended job's task attempts whose events are incomplete.

    They are not read again: by the time the Job API reports a job's end, Ray's task events of that
    job are final (measured on Ray 2.60, 22 jobs read 15-76 ms after their end and again 2 s later,
    quiet and with both cores busy: not one row changed; what was missing then was missing for good).
    """
    left = unsettled(tasks)
    if left:
        missing["tasks_unsettled"] = (
            f"{left} task attempt(s) had no end or no task:execute span (Ray did not deliver them): "
            "counted from their start to their end, else to their worker's next task attempt, else to "
            "the job's end"
        )


def _job_times(job: Mapping[str, Any] | None, now: float) -> tuple[float, float]:
    start = (job or {}).get("start_time") or now * 1000.0
    end = (job or {}).get("end_time") or now * 1000.0
    return start / 1000.0, end / 1000.0


def collect_usage(state: DashboardState, request: UsageRequest) -> UsageRecord:
    """The job's record: never raises for what the dashboard could not tell (see ``not_available``).

    :param state: the cluster's dashboard.
    :param request: what the caller knows.
    """
    now = time.time()
    missing: dict[str, str] = {}
    job = _read("job", missing, lambda: state.job(request.submission_id))
    submitted, ended = _job_times(job, now)
    ray_job_id = (job or {}).get("job_id")
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="usage-read") as pool:  # four reads at once
        reads = {
            "nodes": pool.submit(_read, "nodes", missing, state.nodes),
            "actors": pool.submit(_read, "actors", missing, state.actors),
        }
        if ray_job_id:
            reads["tasks"] = pool.submit(_read, "tasks", missing, lambda: state.tasks(ray_job_id))
            reads["gcs_actors"] = pool.submit(
                _read, "gcs_actors", missing, lambda: state.job_actors(ray_job_id)
            )
        nodes, actors = reads["nodes"].result(), reads["actors"].result()
        listed = reads["tasks"].result() if "tasks" in reads else None
        gcs_actors = reads["gcs_actors"].result() if "gcs_actors" in reads else None
    if listed is not None and ray_job_id and (job or {}).get("end_time"):
        _note_unsettled(listed[0], missing)
    supervisor = find_supervisor(state, request.submission_id, actors or [], missing)
    window = Window(
        submitted=submitted,
        ended=ended,
        driver_started=(supervisor or {}).get("startTime", 0) / 1000.0 or None,
        task_started=request.task_started,
        cluster_ready=request.cluster_ready,
    )
    if not ray_job_id:
        missing.setdefault("tasks", "the Job API named no Ray job id (the driver never started?)")
    tasks, note = listed if listed is not None else ([], None)
    if note:
        missing["tasks_truncated"] = note
    groups = {node.node_id: node.group for node in nodes or []}
    own_actors: list[dict[str, Any]] = []
    if ray_job_id and actors is not None:
        if gcs_actors is not None and gcs_actors[1]:
            missing["gcs_actors_truncated"] = gcs_actors[1]
        own_actors = job_actors(
            actors,
            gcs_actors[0] if gcs_actors is not None else None,
            ray_job_id,
            missing,
            lambda: _read("actors_reread", missing, state.actors),
            tasks=tasks,
        )
    driver_node = str((job or {}).get("driver_node_id") or "")
    allocated = allocation(
        tasks=tasks,
        actors=own_actors,
        entrypoint=record_resources(request.entrypoint),
        window=window,
        node_groups=groups,
        driver_group=groups.get(driver_node, HEAD_GROUP),
    )
    if allocated.timed_by_owner:
        missing["tasks_timed_by_owner"] = (
            f"{allocated.timed_by_owner} ended task attempt(s) had neither a start event nor a task:execute "
            "span (Ray lost their worker's events): counted from their owner's SUBMITTED_TO_WORKER to their "
            "end, an upper bound"
        )
    if allocated.startless:
        missing["tasks_without_start"] = (
            f"{allocated.startless} ended task attempt(s) had neither a start event, a task:execute span nor "
            "their owner's SUBMITTED_TO_WORKER (Ray lost them): not counted"
        )
    if request.teardown_note:
        missing["teardown"] = request.teardown_note
    record = build_record(
        submission_id=request.submission_id,
        ray_job_id=ray_job_id,
        cluster=request.cluster,
        mode=request.mode,
        own_cluster=request.own_cluster,
        window=window,
        nodes=nodes,
        allocated=allocated if listed is not None or actors is not None else None,
        prices=request.prices,
        not_available=missing,
        job_status=(job or {}).get("status"),
        ended_by=request.ended_by,
    )
    log.debug("usage of %s: %s", request.submission_id, record.line())
    return record

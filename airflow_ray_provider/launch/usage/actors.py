"""Which of the dashboard's actors are the job's: its supervisor and its own actors, mended by id.

``/logical/actors`` is the one actor list with start and end times, but the dashboard applies the GCS's
actor updates in poll batches keyed by actor id (``node_head._process_updated_actor_table``). The GCS
publishes an actor's registration whole (``jobId``, ``className``, ``requiredResources``) and every later
change as state fields only (state, address, pid, times, a named actor's name; Ray's
``GenActorDataOnlyWithStates``). When one batch holds both, only the change is kept, and an actor the
dashboard did not know yet is stored from it: no job, no class, no resources, for good (later changes
update state fields only). A loaded head, or a job that starts actors while others change, makes that
likely. The state API (``/api/v0/actors``, read from the GCS) has those fields but no times, so the two
lists are joined by actor id. An actor of the job that the dashboard still lacks after a few re-reads
(or holds without a start) is counted from its creation task's end (``/api/v0/tasks``: task events, a
separate pipeline; the GCS stamps an actor's start then too) to the job's end, an upper bound the record
names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.launch.usage.state import DashboardState, StateUnreadableError

#: The name Ray's job manager gives a job's supervisor actor (it starts the driver).
SUPERVISOR_PREFIX = "_ray_internal_job_actor_"
#: How long the dashboard may take to apply the GCS's last actor updates (it polls them continuously).
ACTOR_UPDATES_SETTLE_S = 1.0
#: Re-reads of ``/logical/actors`` while it still lacks one of the job's actors or an end the GCS has, each
#: :data:`ACTOR_UPDATES_SETTLE_S` after the last. One was not enough on a loaded head (a full test run,
#: load 6-8, a head that took 26 s to start: a killed GPU actor still absent 1 s later, its GPU time lost);
#: the wait is paid only by a record that would otherwise lose an actor.
ACTOR_REREADS = 3


def find_supervisor(
    state: DashboardState, submission_id: str, actors: list[dict[str, Any]], missing: dict[str, str]
) -> dict[str, Any] | None:
    """The job's supervisor actor in ``/logical/actors`` (its ``startTime`` is when the driver starts).

    By name first; by name failing (a row the dashboard stored from a state change can lack fields, see
    the module's docstring), the supervisor's id comes from the state API (``/api/v0/actors``) and is
    looked up in the list by id.
    """
    name = SUPERVISOR_PREFIX + submission_id
    found = next((a for a in actors if a.get("name") == name), None)
    if found is not None or not actors:
        return found
    try:
        rows = state.actors_named(name)
    except StateUnreadableError as exc:
        missing["queued"] = f"the job's supervisor is not named in /logical/actors and {exc}"
        return None
    ids = {str(row.get("actor_id")) for row in rows}
    found = next((a for a in actors if str(a.get("actorId")) in ids), None)
    if found is None and ids:
        missing["queued"] = "/api/v0/actors names the job's supervisor, /logical/actors does not list it"
    elif found is None:
        missing["queued"] = "the job's supervisor actor is in neither /logical/actors nor /api/v0/actors"
    return found


@dataclass(frozen=True)
class JobActors:
    """The job's actors as the record counts them, and what of the GCS's list the dashboard lacked.

    :param rows: the job's ``/logical/actors`` rows, with ``jobId``, ``className`` and
        ``requiredResources`` filled from the GCS's row where the dashboard's copy lost them.
    :param unlisted: the GCS's rows of the job's actors that ``/logical/actors`` does not hold, or holds
        without a start time (the record cannot time them from the dashboard).
    :param unended: class names of actors the GCS has dead that the dashboard still holds without an end.
    :param mended: how many rows had fields filled from the GCS.
    """

    rows: list[dict[str, Any]]
    unlisted: list[dict[str, Any]] = field(default_factory=list)
    unended: list[str] = field(default_factory=list)
    mended: int = 0


def ran(gcs: Mapping[str, Any]) -> bool:
    """The GCS's row is of an actor that came alive (a dead one keeps its pid; one that never ran has 0)."""
    return gcs.get("state") in ("ALIVE", "RESTARTING") or bool(gcs.get("pid"))


def mend_job_actors(
    listed: list[dict[str, Any]], gcs_rows: list[dict[str, Any]], ray_job_id: str
) -> JobActors:
    """Join the dashboard's actors (camelCase) with the state API's actors of the job (snake_case)."""
    by_id = {str(row.get("actor_id")): row for row in gcs_rows}
    rows: list[dict[str, Any]] = []
    mended, seen, unended = 0, set(), []
    for actor in listed:
        actor_id = str(actor.get("actorId"))
        gcs = by_id.get(actor_id)
        if gcs is None:
            if actor.get("jobId") == ray_job_id:
                rows.append(actor)
            continue
        if not actor.get("startTime") and ran(gcs):
            continue  # held without its start: timed like an unlisted actor (see job_actors)
        seen.add(actor_id)
        filled = {
            key: gcs.get(source)
            for key, source in (
                ("jobId", "job_id"),
                ("className", "class_name"),
                ("requiredResources", "required_resources"),
            )
            if not actor.get(key) and gcs.get(source)
        }
        mended += int(bool(filled))
        rows.append({**actor, **filled})
        if gcs.get("state") == "DEAD" and not actor.get("endTime"):
            unended.append(str(gcs.get("class_name") or "actor"))
    unlisted = [row for key, row in by_id.items() if key not in seen and ran(row)]
    return JobActors(rows=rows, unlisted=unlisted, unended=unended, mended=mended)


def creation_starts(tasks: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Actor id -> when the actor came alive (ms): its first creation task attempt's end, which is when
    the GCS stamps an actor's ``startTime``. From the job's ``/api/v0/tasks`` rows: the owner (the driver)
    reports a creation task's end, so it is there even when the actor's own worker was killed before it
    reported its events (then the row has no start time)."""
    starts: dict[str, float] = {}
    for task in tasks:
        if task.get("type") != "ACTOR_CREATION_TASK" or task.get("state") != "FINISHED":
            continue
        if task.get("actor_id") and task.get("end_time_ms"):
            actor_id, alive = str(task["actor_id"]), float(task["end_time_ms"])
            starts[actor_id] = min(alive, starts.get(actor_id, alive))
    return starts


def timed_by_creation(gcs: dict[str, Any], start_ms: float) -> dict[str, Any]:
    """A ``/logical/actors``-shaped row for an actor the dashboard cannot time: from when its creation
    task ended, no end (the record counts it to the job's end), job, class and resources from the GCS."""
    return {
        "actorId": gcs.get("actor_id"),
        "jobId": gcs.get("job_id"),
        "className": gcs.get("class_name"),
        "state": gcs.get("state"),
        "requiredResources": gcs.get("required_resources") or {},
        "address": {"nodeId": gcs.get("node_id")},
        "startTime": start_ms,
        "endTime": 0,
    }


def _names(rows: list[dict[str, Any]]) -> str:
    return ", ".join(sorted(str(row.get("class_name") or "actor") for row in rows))


def job_actors(
    listed: list[dict[str, Any]],
    gcs_rows: list[dict[str, Any]] | None,
    ray_job_id: str,
    missing: dict[str, str],
    reread: Callable[[], list[dict[str, Any]] | None],
    tasks: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The job's actors for the record; what stays unmatched is named in ``not_available``.

    :param listed: ``/logical/actors``.
    :param gcs_rows: the state API's actors of the job, ``None`` when it did not answer (then the
        dashboard's rows are taken by their ``jobId`` alone).
    :param reread: ``/logical/actors`` read again, up to :data:`ACTOR_REREADS` times, each after
        :data:`ACTOR_UPDATES_SETTLE_S`, while the dashboard lacks one of the job's actors or an end the GCS
        has (``None``: it did not answer, no more tries).
    :param tasks: the job's ``/api/v0/tasks`` rows: an actor the dashboard still cannot time is counted
        from its creation task's end to the job's end (``actors_timed_by_creation``), else not at all
        (``actors_unlisted``).
    """
    if gcs_rows is None:
        return [a for a in listed if a.get("jobId") == ray_job_id]
    found = mend_job_actors(listed, gcs_rows, ray_job_id)
    for _ in range(ACTOR_REREADS):
        if not (found.unlisted or found.unended):
            break
        time.sleep(ACTOR_UPDATES_SETTLE_S)
        again = reread()
        if again is None:
            break
        found = mend_job_actors(again, gcs_rows, ray_job_id)
    starts = creation_starts(tasks)
    timed = [row for row in found.unlisted if str(row.get("actor_id")) in starts]
    lost = [row for row in found.unlisted if str(row.get("actor_id")) not in starts]
    if timed:
        missing["actors_timed_by_creation"] = (
            f"{len(timed)} of the job's actors ({_names(timed)}) are in /api/v0/actors but not timed in "
            "/logical/actors: counted from their creation task's end to the job's end (an upper bound)"
        )
    if lost:
        missing["actors_unlisted"] = (
            f"{len(lost)} of the job's actors ({_names(lost)}) are in /api/v0/actors but not timed in "
            "/logical/actors, and no finished creation task in /api/v0/tasks: not counted"
        )
    if found.unended:
        missing["actors_unended"] = (
            f"{len(found.unended)} actor(s) ({', '.join(sorted(found.unended))}) are dead in the GCS but "
            "have no end time in /logical/actors yet: counted to the job's end"
        )
    return found.rows + [timed_by_creation(row, starts[str(row.get("actor_id"))]) for row in timed]

"""The usage record as an observer of a run (:func:`looked`, :func:`record`, :func:`deleted`): made once,
at the first look that finds the job ended while its cluster still answers (KubeRay may delete a RayJob's
cluster right after its job), else when the run ends, from the dashboard's routes (docs/usage.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import quote

from airflow_ray_provider.jobs import JobState
from airflow_ray_provider.launch.usage.record import Node, check_against_cluster, make_record

if TYPE_CHECKING:
    from airflow_ray_provider.launch.run import JobRun, Observation
    from airflow_ray_provider.launch.usage.record import Prices, UsageOptions

T = TypeVar("T")
#: The record's ``ended_by`` for a run's ``Ending`` (a ``str`` enum: its values are the keys).
ENDED_BY = {"timed_out": "timed_out", "user_kill": "killed", "worker_sigterm": "killed"}
#: A RayJob's deadlines, which KubeRay enforces (its record then says ``timed_out``).
DEADLINES = ("DeadlineExceeded", "PreRunningDeadlineExceeded")

#: The state API's largest page (``RAY_MAX_LIMIT_FROM_API_SERVER``'s default).
STATE_LIMIT = 10_000
#: The name Ray's job manager gives a job's supervisor actor (it starts the driver).
SUPERVISOR_PREFIX = "_ray_internal_job_actor_"
#: How long the dashboard may take to apply the GCS's last actor updates (it polls them continuously).
ACTOR_UPDATES_SETTLE_S = 1.0
#: Re-reads of ``/logical/actors`` while it lacks one of the job's actors or an end the GCS has (a loaded
#: head can take more than one); only a record that would otherwise lose an actor waits.
ACTOR_REREADS = 3


class DashboardReader(Protocol):
    """A cluster's dashboard, read-only, from several threads at once (the Job API client is one)."""

    def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        """``GET`` a dashboard path with query ``params``: the JSON body; raises when there is none."""


def _read(missing: dict[str, str], key: str, route: str, call: Callable[[], T]) -> T | None:
    """``call()``, or ``None`` with why under ``missing[key]`` (the record names it; the job goes on)."""
    try:
        return call()
    except Exception as exc:
        text = (str(exc).splitlines() or [""])[0][:200]
        missing[key] = f"{route} did not answer: {type(exc).__name__}" + (f": {text}" if text else "")
        return None


def state_list(
    reader: DashboardReader, route: str, where: tuple[str, str] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A state API list with every row's detail, and what it left out (``None``: every matching row),
    filtered by one equality ``where``. Ray counts a list in stages (``ListApiResponse``): ``total`` rows
    of all jobs; ``num_after_truncation`` after the source's cut (for tasks, ``total`` also holds the
    events Ray dropped); ``num_filtered`` after the filters; then the ``limit``. A filter is not a cut."""
    params = {"detail": "true", "limit": str(STATE_LIMIT)}
    if where is not None:
        params.update(filter_keys=where[0], filter_predicates="=", filter_values=where[1])
    body = reader.get_json(route, params) or {}
    data = (body.get("data") or {}).get("result") or {}
    if not body.get("result", True) or "result" not in data:
        raise ValueError(f"{route} answered without a result: {body.get('msg')}")
    rows = list(data["result"])
    total = int(data.get("total") or 0)
    kept = int(data.get("num_after_truncation", total) or 0)
    matched = int(data.get("num_filtered", len(rows)) or 0)
    notes = []
    if matched > len(rows):
        notes.append(f"{route} listed {len(rows)} of the {matched} matching rows (its limit)")
    if total > kept:
        notes.append(f"{route}'s source kept {kept} of {total} rows (cut there, or events Ray dropped)")
    return rows, "; ".join(notes) or None


def read_nodes(reader: DashboardReader) -> list[Node]:
    """The cluster's nodes, alive and dead (``/api/v0/nodes``)."""
    return [Node.from_state(row) for row in state_list(reader, "/api/v0/nodes")[0]]


def logical_actors(reader: DashboardReader) -> list[dict[str, Any]]:
    """Every actor the dashboard keeps, with ``startTime``/``endTime`` (ms) and lifetime resources
    (``nocache=1``: a 2 s cache would miss a job that ended within 2 s of an earlier read)."""
    body = reader.get_json("/logical/actors", {"nocache": "1"}) or {}
    return list(((body.get("data") or {}).get("actors") or {}).values())


def find_supervisor(
    reader: DashboardReader, submission_id: str, actors: list[dict[str, Any]], missing: dict[str, str]
) -> dict[str, Any] | None:
    """The job's supervisor actor in ``/logical/actors`` (its ``startTime`` is the driver's start): by
    name, else (a row stored from a state change can lack it) by the id ``/api/v0/actors`` gives it."""
    name = SUPERVISOR_PREFIX + submission_id
    found = next((a for a in actors if a.get("name") == name), None)
    if found is not None or not actors:
        return found
    route = "/api/v0/actors"
    if (rows := _read(missing, "queued", route, lambda: state_list(reader, route, ("name", name)))) is None:
        return None
    ids = {str(row.get("actor_id")) for row in rows[0]}
    found = next((a for a in actors if str(a.get("actorId")) in ids), None)
    if found is None:
        missing["queued"] = (
            "/api/v0/actors names the job's supervisor, /logical/actors does not list it"
            if ids
            else "the job's supervisor actor is in neither /logical/actors nor /api/v0/actors"
        )
    return found


#: The fields a ``/logical/actors`` row (camelCase) takes from the GCS's row (snake_case) it lacks.
_FROM_GCS = (("jobId", "job_id"), ("className", "class_name"), ("requiredResources", "required_resources"))


def ran(gcs: Mapping[str, Any]) -> bool:
    """The GCS's row is of an actor that came alive (a dead one keeps its pid; one that never ran has 0)."""
    return gcs.get("state") in ("ALIVE", "RESTARTING") or bool(gcs.get("pid"))


#: The job's ``/logical/actors`` rows (mended from the GCS's), the GCS's rows it does not time, and the GCS's
#: rows of the dead actors it holds without an end.
JobActors = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]


def mend_job_actors(
    listed: list[dict[str, Any]], gcs_rows: list[dict[str, Any]], ray_job_id: str
) -> JobActors:
    """Join the dashboard's actors (camelCase) with the state API's actors of the job (snake_case): the
    dashboard can store an actor from a state change alone, without job, class or resources."""
    by_id = {str(row.get("actor_id")): row for row in gcs_rows}
    rows: list[dict[str, Any]] = []
    seen, unended = set(), []
    for actor in listed:
        gcs = by_id.get(str(actor.get("actorId")))
        if gcs is None:
            rows += [actor] if actor.get("jobId") == ray_job_id else []
        elif actor.get("startTime") or not ran(gcs):  # one held without its start is timed as unlisted
            seen.add(str(actor.get("actorId")))
            rows.append({**actor, **{k: gcs[g] for k, g in _FROM_GCS if not actor.get(k) and gcs.get(g)}})
            if gcs.get("state") == "DEAD" and not actor.get("endTime"):
                unended.append(gcs)
    unlisted = [row for key, row in by_id.items() if key not in seen and ran(row)]
    return rows, unlisted, unended


def creation_starts(tasks: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Actor id -> when the actor came alive (ms): its first creation task's end (when the GCS stamps its
    ``startTime``), which the owner reports even when the actor's worker died before reporting its own."""
    starts: dict[str, float] = {}
    for task in tasks:
        created = task.get("type") == "ACTOR_CREATION_TASK" and task.get("state") == "FINISHED"
        if created and task.get("actor_id") and task.get("end_time_ms"):
            actor_id, alive = str(task["actor_id"]), float(task["end_time_ms"])
            starts[actor_id] = min(alive, starts.get(actor_id, alive))
    return starts


def job_actors(
    listed: list[dict[str, Any]],
    gcs_rows: list[dict[str, Any]] | None,
    ray_job_id: str,
    missing: dict[str, str],
    reread: Callable[[], list[dict[str, Any]] | None],
    tasks: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The job's actors for the record: ``listed`` mended from ``gcs_rows`` (``None``: the dashboard's
    ``jobId`` decides), ``reread`` while it lacks an actor or an end, an actor still untimed counted from
    its creation task's end in ``tasks``; what stays unmatched is named in ``not_available``."""
    if gcs_rows is None:
        return [a for a in listed if a.get("jobId") == ray_job_id]
    rows, unlisted, unended = mend_job_actors(listed, gcs_rows, ray_job_id)
    for _ in range(ACTOR_REREADS):
        if not (unlisted or unended):
            break
        time.sleep(ACTOR_UPDATES_SETTLE_S)
        if (again := reread()) is None:
            break
        rows, unlisted, unended = mend_job_actors(again, gcs_rows, ray_job_id)
    starts = creation_starts(tasks)
    timed = [row for row in unlisted if str(row.get("actor_id")) in starts]
    lost = [row for row in unlisted if row not in timed]
    untimed = "are in /api/v0/actors but not timed in /logical/actors"
    notes = {
        "actors_timed_by_creation": (timed, f"{untimed}: counted from their creation task's end to the job's "
                                     "end (an upper bound)"),
        "actors_unlisted": (lost, f"{untimed}, and no finished creation task in /api/v0/tasks: not counted"),
        "actors_unended": (unended, "are dead in the GCS but have no end time in /logical/actors yet: "
                           "counted to the job's end"),
    }  # fmt: skip
    for key, (named, text) in notes.items():
        if named:
            names = ", ".join(sorted(str(row.get("class_name") or "actor") for row in named))
            missing[key] = f"{len(named)} of the job's actors ({names}) {text}"
    for gcs in timed:  # a /logical/actors-shaped row: from its creation task's end to the job's end
        row = {key: gcs.get(source) for key, source in _FROM_GCS}
        row.update(actorId=gcs.get("actor_id"), requiredResources=row["requiredResources"] or {},
                   address={"nodeId": gcs.get("node_id")}, startTime=starts[str(gcs.get("actor_id"))],
                   endTime=0)  # fmt: skip
        rows.append(row)
    return rows


def collect_usage(reader: DashboardReader, request: UsageOptions) -> dict[str, Any]:
    """The record of a job that ended (by itself, a timeout or a kill), read while its cluster exists: the
    job first (its Ray job id filters the rest; without one it never called ``ray.init``), then four reads
    at once."""
    missing: dict[str, str] = {}
    path = f"/api/jobs/{quote(request.submission_id, safe='')}"
    job = _read(missing, "job", path, lambda: dict(reader.get_json(path) or {}))
    ray_job_id = str((job or {}).get("job_id") or "")

    def job_rows(route: str, cut_key: str) -> list[dict[str, Any]]:
        rows, note = state_list(reader, route, ("job_id", ray_job_id))
        missing.update({cut_key: note} if note else {})
        return rows

    calls: dict[str, tuple[str, Callable[[], Any]]] = {
        "nodes": ("/api/v0/nodes", partial(read_nodes, reader)),
        "actors": ("/logical/actors", partial(logical_actors, reader)),
    }
    if ray_job_id:
        calls["tasks"] = ("/api/v0/tasks", lambda: job_rows("/api/v0/tasks", "tasks_truncated"))
        calls["gcs_actors"] = ("/api/v0/actors", lambda: job_rows("/api/v0/actors", "gcs_actors_truncated"))
    elif job is None:
        missing["tasks"] = "not read: the job's Ray job id filters them, and the job could not be read"
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="usage-read") as pool:
        futures = {key: pool.submit(_read, missing, key, route, call) for key, (route, call) in calls.items()}
    got = {key: future.result() for key, future in futures.items()}
    every, tasks = got["actors"], got.get("tasks", [])  # no Ray job id: no tasks
    own: list[dict[str, Any]] | None = None if ray_job_id else []
    if every is not None and ray_job_id:
        reread = partial(_read, missing, "actors_reread", "/logical/actors", partial(logical_actors, reader))
        own = job_actors(every, got.get("gcs_actors"), ray_job_id, missing, reread, tasks=tasks or [])
    supervisor = find_supervisor(reader, request.submission_id, every or [], missing)
    return make_record(request, now=time.time(), job=job, nodes=got["nodes"], tasks=tasks, actors=own,
                       supervisor=supervisor, missing=missing)  # fmt: skip


def check_prices_on_cluster(reader: DashboardReader, prices: Prices) -> str | None:
    """:func:`~.record.check_against_cluster` on the cluster's nodes before submit: ``None`` when checked,
    else why it could not be (the dashboard did not answer)."""
    missing: dict[str, str] = {}
    if (nodes := _read(missing, "nodes", "/api/v0/nodes", partial(read_nodes, reader))) is None:
        return missing["nodes"]
    groups: dict[str, set[str]] = {}
    for node in nodes:
        groups.setdefault(node.group, set()).update(node.resources)
    check_against_cluster(prices, groups)
    return None


def request_of(run: JobRun, options: UsageOptions) -> UsageOptions | None:
    """``options`` with what the run knows of its job (``None``: no Ray job to ask about)."""
    subject, ended_by = run.subject, ENDED_BY.get(run.ending or "", "finished")
    if isinstance(subject, JobState) or subject is None:
        sid, cluster, owned = run.submission_id, options.cluster, run.target.owned
        started = run.times.get("reach") if owned else None  # it waited for its own cluster
        ready = run.times.get("ready") if owned else None
    else:  # a RayJob: its Ray job and the cluster KubeRay made for it
        status = subject.status
        sid, cluster, ready = status.job_id, status.cluster_name or options.cluster, None
        started = datetime.fromisoformat(status.start_time).timestamp() if status.start_time else None
        if status.reason in DEADLINES:
            ended_by = "timed_out"
    if not sid:
        return None
    return dataclasses.replace(options, submission_id=sid, cluster=cluster, task_started=started,
                               cluster_ready=ready, ended_by=ended_by)  # fmt: skip


def usage_record(run: JobRun) -> dict[str, Any] | None:
    """The record of ``run``'s job from its cluster's dashboard; ``None`` when it could not be made (the
    reason is said; the job's outcome stands)."""
    client = run.target.dashboard()
    request = request_of(run, run.usage) if run.usage is not None else None
    if client is None or request is None:
        run.say("No usage record: the job or its cluster's dashboard was never reached")
        return None
    try:
        return collect_usage(client.reader(), request)
    except Exception as exc:  # the record never hides the job's outcome
        run.say(f"Could not make the usage record of Ray job {request.submission_id}: {exc}")
        return None


def looked(run: JobRun, seen: Observation) -> bool:
    """Keep what ``seen`` shows; whether ``run``'s record is due (the first look that shows the job ended)."""
    run.subject = seen.subject if seen.subject is not None else run.subject
    subject = seen.subject
    ended = subject is not None and (subject if isinstance(subject, JobState) else subject.status).is_terminal
    return ended and run.usage is not None and run.record is None


def record(run: JobRun, *, refresh: bool = False) -> None:
    """Make ``run``'s record once (``refresh``: the run ended before its wait did, a kill or an error: look
    at the job first, for what it is now)."""
    if run.usage is None or run.record is not None or not run.submission_id:
        return
    if refresh and run.last is None:
        with contextlib.suppress(Exception):
            run.subject = run.target.look(run.submission_id, with_log=False).subject or run.subject
    run.record = usage_record(run) or {}


def deleted(run: JobRun) -> None:
    """Add ``phases.teardown_s`` to ``run``'s record (a new dict): its job's end to now, its cluster gone."""
    if data := run.record:
        phases = {**data["phases"], "teardown_s": round(max(0.0, time.time() - data["times"]["ended"]), 3)}
        missing = {k: v for k, v in data["not_available"].items() if k != "teardown"}
        run.record = {**data, "phases": phases, "not_available": missing}

"""The reads through a dashboard: state API lists and their cut notes, the job's actors (the dashboard's
``/logical/actors`` joined with the GCS's ``/api/v0/actors``), and a record from a dashboard that answers
in Ray 2.60's shapes or not at all (a closed port: a real connection refused). The same reads on a live
head: tests/integration/launch/test_usage.py."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import requests

from airflow_ray_provider.launch.usage import UsageOptions, observer, usage_line
from airflow_ray_provider.launch.usage.observer import collect_usage, job_actors, mend_job_actors, state_list
from airflow_ray_provider.launch.usage.record import Window, allocation

pytestmark = pytest.mark.unit

JOB = "02000000"
T0_MS = 1_800_000_000_000.0


@pytest.fixture(autouse=True)
def _no_settle_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observer, "ACTOR_UPDATES_SETTLE_S", 0.0)


class Answers:
    """A dashboard that answers each route from what it was given, in Ray 2.60's shapes: the job's
    details, state API lists (``nodes=``, ``tasks=``, ``actors=``: rows, or the list's whole ``result``
    with Ray's counts) and ``/logical/actors`` (``logical=``). It keeps every read it was asked for."""

    def __init__(self, job: dict[str, Any] | None = None, **lists: Any) -> None:
        self.job, self.lists = job or {}, lists
        self.reads: list[tuple[str, dict[str, str] | None]] = []

    def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        self.reads.append((path, params))
        if path.startswith("/api/jobs/"):
            return self.job
        if path == "/logical/actors":
            return {"data": {"actors": {a["actorId"]: a for a in self.lists.get("logical", [])}}}
        listed = self.lists.get(path.rsplit("/", 1)[-1], [])
        result = listed if isinstance(listed, dict) else {"total": len(listed), "result": listed}
        return {"result": True, "msg": "", "data": {"result": result}}


class Plain:
    """The smallest real reader: ``requests`` against a URL, no token (the Job API client adds it)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        answer = requests.get(self.url + path, params=params, timeout=1.0)
        answer.raise_for_status()
        return answer.json()


def test_the_jobs_actors_filtered_out_of_all_the_clusters_actors_are_not_a_cut() -> None:
    # A head with the job's supervisor (its own job) and the job's one actor: Ray counts both in
    # `total` and returns the one that matches the job.
    reader = Answers(actors={"total": 2, "num_after_truncation": 2, "num_filtered": 1,
                             "result": [{"actor_id": "a1"}]})  # fmt: skip
    rows, note = state_list(reader, "/api/v0/actors", ("job_id", JOB))
    assert rows == [{"actor_id": "a1"}] and note is None
    assert reader.reads[0][1] == {"detail": "true", "limit": "10000", "filter_keys": "job_id",
                                  "filter_predicates": "=", "filter_values": JOB}  # fmt: skip


def test_rows_left_out_by_the_limit_are_named() -> None:
    reader = Answers(tasks={"total": 5, "num_after_truncation": 5, "num_filtered": 5, "result": [{}, {}, {}]})
    assert state_list(reader, "/api/v0/tasks", ("job_id", JOB)) == (
        [{}, {}, {}],
        "/api/v0/tasks listed 3 of the 5 matching rows (its limit)",
    )


def test_task_events_ray_dropped_are_named() -> None:
    cut = {"total": 250, "num_after_truncation": 200, "num_filtered": 200, "result": [{}] * 200}
    _, note = state_list(Answers(tasks=cut), "/api/v0/tasks", ("job_id", JOB))
    assert note == "/api/v0/tasks's source kept 200 of 250 rows (cut there, or events Ray dropped)"


def test_an_answer_without_the_stage_counts_is_taken_as_whole() -> None:
    assert state_list(Answers(actors={"total": 7, "result": [{}]}), "/api/v0/actors") == ([{}], None)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_dashboard_that_does_not_answer_gives_a_record_that_says_so() -> None:
    reader = Plain(f"http://127.0.0.1:{_closed_port()}")
    request = UsageOptions(submission_id="s", cluster="gone", mode="standing", own_cluster=False,
                           entrypoint={"CPU": 1.0})  # fmt: skip
    record = collect_usage(reader, request)
    assert {"job", "nodes", "actors", "tasks"} <= set(record["not_available"])
    assert "did not answer" in record["not_available"]["nodes"]
    assert record["counts"] == {"tasks": 0, "actors": 0} and record["ray_job_id"] is None


def test_a_driver_that_never_connected_to_ray_has_no_tasks_to_read_and_its_work_is_named_na() -> None:
    """A driver without ``ray.init`` (an in-process engine): the Job API names no Ray job id."""
    from airflow_ray_provider.launch.usage.record import DRIVER_NOT_COUNTED

    head = {"node_id": "n1", "is_head_node": True, "resources_total": {"CPU": 2.0}}
    reader = Answers({"status": "SUCCEEDED", "start_time": T0_MS, "end_time": T0_MS + 5000}, nodes=[head])
    record = collect_usage(reader, UsageOptions("one_task", "c", True, submission_id="s"))
    assert "/api/v0/tasks" not in [path for path, _ in reader.reads]
    assert record["not_available"] == {"allocated_cpu": DRIVER_NOT_COUNTED}, record["not_available"]
    assert usage_line(record).startswith("reserved 0.0028 CPU-h, allocated n/a (the driver reserves no Ray")


def test_an_ended_jobs_tasks_are_read_once_and_an_attempt_without_events_is_named() -> None:
    """Ray's task events are final once the Job API reports the end (docs/usage.md): no re-read, no wait;
    the attempt that ran without a ``task:execute`` span is counted to its end and named."""
    ran = {"type": "NORMAL_TASK", "state": "FINISHED", "func_or_class_name": "f",
           "required_resources": {"CPU": 1.0}, "node_id": "n1", "worker_id": "w1",
           "start_time_ms": T0_MS + 1000, "end_time_ms": T0_MS + 3000}  # fmt: skip
    head = {"node_id": "n1", "is_head_node": True, "resources_total": {"CPU": 2.0}}
    job = {"job_id": JOB, "start_time": T0_MS, "end_time": T0_MS + 10_000}
    reader = Answers(job, nodes=[head], tasks=[ran])
    record = collect_usage(reader, UsageOptions(submission_id="s", cluster="c", mode="standing",
                                                own_cluster=False))  # fmt: skip
    assert [path for path, _ in reader.reads].count("/api/v0/tasks") == 1  # read once: no wait
    assert (
        "1 task attempt(s) had no end or no task:execute span" in record["not_available"]["tasks_unsettled"]
    )
    assert record["counts"]["tasks"] == 1 and record["allocated"]["CPU"] * 3600 == pytest.approx(
        2.0, rel=0.01
    )


def _listed(actor_id: str, *, job: str = JOB, cls: str = "Holder", start: float = 5, end: float = 15) -> dict:
    """A dashboard row; ``job=""`` and ``cls=""`` as stored from a state change (no job, class, resources)."""
    return {
        "actorId": actor_id,
        "jobId": job,
        "className": cls,
        "state": "DEAD" if end else "ALIVE",
        "startTime": T0_MS + start * 1000,
        "endTime": T0_MS + end * 1000 if end else 0,
        "address": {"nodeId": "n1"},
        "requiredResources": {"GPU": 1.0} if cls else {},
    }


def _gcs(actor_id: str, *, cls: str = "Holder", state: str = "DEAD", pid: int = 4242) -> dict[str, Any]:
    """A GCS row as ``/api/v0/actors`` answers it (a dead actor keeps its pid; one that never ran has 0)."""
    return {"actor_id": actor_id, "job_id": JOB, "class_name": cls, "state": state, "pid": pid,
            "node_id": "n1", "required_resources": {"GPU": 1.0}}  # fmt: skip


def _creation(actor_id: str, *, end: float | None, state: str = "FINISHED") -> dict[str, Any]:
    """The actor's creation task as ``/api/v0/tasks`` answers it when the actor's worker was killed before
    it reported its events: the owner's states only (no start time), the end when the actor came alive."""
    return {"type": "ACTOR_CREATION_TASK", "actor_id": actor_id, "state": state, "start_time_ms": None,
            "end_time_ms": T0_MS + end * 1000 if end is not None else None}  # fmt: skip


def test_an_actor_stored_from_a_state_change_is_counted_with_the_gcss_job_class_and_resources() -> None:
    listed = [_listed("a1", job="", cls=""), _listed("other", job="03000000")]
    rows, unlisted, unended = mend_job_actors(listed, [_gcs("a1")], JOB)
    assert not unlisted and not unended
    assert [(a["actorId"], a["jobId"], a["className"]) for a in rows] == [("a1", JOB, "Holder")]
    window = Window(submitted=T0_MS / 1000, ended=T0_MS / 1000 + 20, driver_started=T0_MS / 1000 + 1)
    got = allocation(tasks=[], actors=rows, entrypoint={}, window=window, node_groups={"n1": "headgroup"})
    assert got.actors == 1 and got.by_group["headgroup"]["GPU"] == pytest.approx(10 / 3600)
    # the dashboard's filter alone would lose it
    assert [a for a in listed if a["jobId"] == JOB] == []


def test_a_whole_row_is_kept_as_the_dashboard_has_it_and_a_row_the_gcs_lacks_stays_by_its_job_id() -> None:
    whole, evicted = _listed("a1"), _listed("a2", cls="Old")
    rows, _, _ = mend_job_actors([whole, evicted], [_gcs("a1")], JOB)
    assert rows == [whole, evicted]


def test_an_actor_missing_from_the_dashboard_is_read_again_a_bounded_number_of_times_then_named() -> None:
    missing: dict[str, str] = {}
    rereads: list[int] = []

    def reread() -> list[dict[str, Any]]:
        rereads.append(1)
        return [_listed("a1", job="", cls="")]

    rows = job_actors([], [_gcs("a1"), _gcs("a2", cls="Lost")], JOB, missing, reread)
    assert len(rereads) == observer.ACTOR_REREADS and [a["actorId"] for a in rows] == ["a1"]
    assert "Lost" in missing["actors_unlisted"] and "not counted" in missing["actors_unlisted"]


def test_an_actor_the_dashboard_applies_late_is_counted_once_it_appears() -> None:
    """Seen in a full run on a loaded head: the killed GPU actor was still absent 1 s after the job."""
    missing: dict[str, str] = {}
    answers = [[], [_listed("a1")], [_listed("a1")]]
    rereads: list[int] = []

    def reread() -> list[dict[str, Any]]:
        rereads.append(1)
        return answers.pop(0)

    rows = job_actors([], [_gcs("a1")], JOB, missing, reread)
    assert [a["actorId"] for a in rows] == ["a1"] and not missing
    assert len(rereads) == 2  # read until it was there, no more


def test_an_end_the_dashboard_has_not_applied_yet_is_read_again_and_else_named() -> None:
    missing: dict[str, str] = {}
    alive = _listed("a1", end=0)
    rows = job_actors([alive], [_gcs("a1", state="DEAD")], JOB, missing, lambda: [_listed("a1")])
    assert rows[0]["endTime"] and not missing
    rows = job_actors([alive], [_gcs("a1", state="DEAD")], JOB, missing, lambda: None)
    assert rows == [alive] and "counted to the job's end" in missing["actors_unended"]


def test_without_the_gcss_rows_the_dashboards_job_id_decides() -> None:
    missing: dict[str, str] = {}
    listed = [_listed("a1"), _listed("a2", job="")]
    assert job_actors(listed, None, JOB, missing, lambda: None) == [listed[0]] and not missing


def test_an_actor_the_dashboard_never_lists_is_counted_from_its_creation_to_the_jobs_end_and_named() -> None:
    """On a slow head a killed GPU actor can still be missing from /logical/actors after three re-reads;
    the task events still have its creation task's end."""
    missing: dict[str, str] = {}
    tasks = [_creation("a1", end=5), _creation("a0", end=None, state="FAILED")]
    rows = job_actors([], [_gcs("a1")], JOB, missing, lambda: [], tasks=tasks)
    assert [(a["actorId"], a["className"], a["startTime"], a["endTime"]) for a in rows] == [
        ("a1", "Holder", T0_MS + 5000, 0)
    ]
    note = missing["actors_timed_by_creation"]
    assert "Holder" in note and "upper bound" in note
    assert "actors_unlisted" not in missing
    window = Window(submitted=T0_MS / 1000, ended=T0_MS / 1000 + 20, driver_started=T0_MS / 1000 + 1)
    got = allocation(tasks=[], actors=rows, entrypoint={}, window=window, node_groups={"n1": "headgroup"})
    assert got.actors == 1 and got.by_group["headgroup"]["GPU"] == pytest.approx(15 / 3600)  # to the end


def test_a_row_the_dashboard_holds_without_a_start_is_timed_by_its_creation_task() -> None:
    missing: dict[str, str] = {}
    startless = {**_listed("a1"), "startTime": 0}
    tasks = [_creation("a1", end=7)]
    rows = job_actors([startless], [_gcs("a1")], JOB, missing, lambda: [startless], tasks=tasks)
    assert [(a["actorId"], a["startTime"]) for a in rows] == [("a1", T0_MS + 7000)]
    assert "actors_timed_by_creation" in missing
    # counted by the dashboard's row alone, an actor without a start is in no figure
    window = Window(T0_MS / 1000, T0_MS / 1000 + 20)
    old = allocation(tasks=[], actors=[startless], entrypoint={}, window=window, node_groups={})
    assert old.actors == 0


def test_an_actor_that_never_ran_is_neither_waited_for_nor_named() -> None:
    missing: dict[str, str] = {}
    rereads: list[int] = []

    def reread() -> list[dict[str, Any]]:
        rereads.append(1)
        return []

    rows = job_actors([], [_gcs("a1", cls="Never", pid=0)], JOB, missing, reread, tasks=[])
    assert rows == [] and rereads == [] and not missing


def test_a_supervisor_the_gcs_names_but_the_dashboard_lacks_is_told_apart_from_one_neither_has() -> None:
    from airflow_ray_provider.launch.usage.observer import SUPERVISOR_PREFIX, find_supervisor

    supervisor = {"actor_id": "sup1", "name": SUPERVISOR_PREFIX + "s1"}
    named = Answers(actors=[supervisor])
    nameless = {**_listed("sup1", job="", cls=""), "name": ""}  # stored from a state change
    missing: dict[str, str]
    assert find_supervisor(named, "s1", [nameless], missing := {}) is nameless and not missing
    assert (named.reads[0][1] or {})["filter_values"] == supervisor["name"]  # asked for by name
    assert find_supervisor(named, "s1", [_listed("other")], missing := {}) is None
    assert missing["queued"].startswith("/api/v0/actors names the job's supervisor,")
    assert find_supervisor(Answers(), "s1", [_listed("other")], missing := {}) is None
    assert "in neither" in missing["queued"]
    unanswered = Plain(f"http://127.0.0.1:{_closed_port()}")
    assert find_supervisor(unanswered, "s1", [_listed("other")], missing := {}) is None
    assert "/api/v0/actors did not answer: ConnectionError" in missing["queued"]

"""The busy-CPU ledger fed sample payloads in the dashboard's shape (``/test/dump?key=node_physical_stats``):
a worker that appears, grows and disappears; a reused pid; a counter that goes back; which processes are
the job's. A sampler on a closed port counts its failures and never raises (a real refused connection)."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from airflow_ray_provider.launch.usage import DashboardState
from airflow_ray_provider.launch.usage.busy import BusyLedger, BusySampler, cpu_seconds, job_processes

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


def _worker(pid: int, user: float, system: float = 0.0, created: float = T0 - 100) -> dict[str, Any]:
    times = {"user": user, "system": system, "childrenUser": 9.0}  # a waited-for child's: not its own
    return {"pid": pid, "createTime": created, "cpuTimes": times}


def _dump(**nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"result": True, "data": {"nodePhysicalStats": {n: {"workers": w} for n, w in nodes.items()}}}


def test_cpu_seconds_is_user_plus_system_of_the_process_only() -> None:
    assert cpu_seconds(_worker(1, 1.5, 0.25)) == 1.75
    assert cpu_seconds({"pid": 1}) is None


def test_a_worker_that_appears_grows_and_disappears_counts_its_growth() -> None:
    ledger = BusyLedger(since=T0)
    ledger.add_dump(_dump(n1=[_worker(10, 1.0)]))  # made before the job: counts from this sample
    ledger.add_dump(_dump(n1=[_worker(10, 3.0), _worker(11, 0.5, 0.1, created=T0 + 1)]))  # made during it
    ledger.add_dump(_dump(n1=[_worker(10, 4.0, 0.5), _worker(11, 2.0, 0.1, created=T0 + 1)]))
    ledger.add_dump(_dump(n1=[]))  # both gone: their last values stand
    assert ledger.samples == 4
    assert ledger.busy_seconds({"n1": {10}}) == pytest.approx(3.5)
    assert ledger.busy_seconds({"n1": {11}}) == pytest.approx(2.1)  # from 0: its start-up was the job's
    assert ledger.busy_seconds({"n1": {10, 11}}) == pytest.approx(5.6)
    assert ledger.busy_seconds({"n2": {10}}) == 0.0  # another node's pid 10 is another process
    assert ledger.busy_seconds({"": {10}}) == pytest.approx(3.5)  # a pid without its node: any node


def test_a_reused_pid_is_another_process_and_one_made_after_the_job_is_left_out() -> None:
    ledger = BusyLedger(since=T0)
    ledger.add("n1", [_worker(10, 1.0, created=T0 + 1)])
    ledger.add("n1", [_worker(10, 2.0, created=T0 + 1)])
    ledger.add("n1", [_worker(10, 0.2, created=T0 + 50)])  # the same pid, a new process
    ledger.add("n1", [_worker(10, 0.7, created=T0 + 50)])
    assert ledger.busy_seconds({"n1": {10}}) == pytest.approx(2.7)
    assert ledger.busy_seconds({"n1": {10}}, until=T0 + 20) == pytest.approx(2.0)


def test_a_counter_that_goes_back_banks_what_it_had_and_counts_on_from_there() -> None:
    ledger = BusyLedger(since=T0)
    ledger.add("n1", [_worker(10, 5.0)])
    ledger.add("n1", [_worker(10, 7.0)])
    ledger.add("n1", [_worker(10, 1.0)])  # back: 2 s banked, a new base
    ledger.add("n1", [_worker(10, 1.5)])
    assert ledger.busy_seconds({"n1": {10}}) == pytest.approx(2.5)


def test_the_jobs_processes_are_its_task_workers_actors_supervisor_and_driver() -> None:
    tasks = [{"worker_pid": 11, "node_id": "n1"}, {"worker_pid": None, "node_id": "n1"}]
    actors = [{"pid": 12, "address": {"nodeId": "n2"}}]
    supervisor = {"pid": 13, "address": {"nodeId": "n1"}}
    job = {"driver_info": {"pid": "14"}, "driver_node_id": "n1"}
    assert job_processes(tasks=tasks, actors=actors, supervisor=supervisor, job=job) == {
        "n1": {11, 13, 14},
        "n2": {12},
    }
    assert job_processes(tasks=[], actors=[], supervisor=None, job=None) == {}


def test_the_note_says_lower_bound_and_names_failed_samples() -> None:
    ledger = BusyLedger(since=T0)
    assert "no CPU sample" in (ledger.note() or "")
    ledger.add_dump(_dump(n1=[]))
    ledger.failed("/test/dump did not answer: ConnectionError")
    note = ledger.note() or ""
    assert "lower bound" in note and "1 sample(s) could not be read" in note


def test_a_sampler_on_a_dashboard_that_does_not_answer_counts_failures_and_never_raises() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: a real refused connection
    state = DashboardState(f"http://127.0.0.1:{port}", timeout=1.0)
    sampler = BusySampler(state, since=time.time(), interval=0.05)
    sampler.start()
    time.sleep(0.3)
    ledger = sampler.stop()
    assert ledger.samples == 0 and ledger.failures >= 2 and "did not answer" in (ledger.last_error or "")
    assert sampler.stop() is ledger  # once


def test_the_ledger_round_trips_through_a_trigger_event_as_json() -> None:
    import json

    from airflow_ray_provider.jobs.events import JobDone, JobTimedOut, parse_job_event

    from airflow_ray_provider.jobs.status import JobState

    ledger = BusyLedger(since=T0)
    ledger.add_dump(_dump(n1=[_worker(10, 1.0), _worker(11, 0.5, created=T0 + 1)]))
    ledger.add_dump(_dump(n1=[_worker(10, 3.0), _worker(11, 2.0, 0.5, created=T0 + 1)]))
    ledger.take(None, "/test/dump answered HTTP 500")
    state = JobState.from_dict({"submission_id": "s1", "status": "SUCCEEDED"})
    for event in (
        JobDone("s1", state, 0, ledger.to_dict()),
        JobTimedOut("s1", True, 0, state, ledger.to_dict()),
    ):
        payload = json.loads(json.dumps(event.to_payload()))  # what the triggerer stores
        again = BusyLedger.from_dict(parse_job_event(payload).busy or {})
        pids = {"n1": {10, 11}}
        assert again.busy_seconds(pids) == ledger.busy_seconds(pids) == 2.0 + 2.5
        assert again.busy_seconds({"n1": {11}}, until=T0) == 0.0  # a process made after the end: left out
        assert (again.samples, again.failures, again.note()) == (2, 1, ledger.note())
    assert parse_job_event(JobDone("s1", state).to_payload()).busy is None  # sampled in no trigger


def test_async_sampling_takes_the_same_step_and_leaves_no_task_behind() -> None:
    import asyncio

    from airflow_ray_provider.launch.usage import asampling

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    state = DashboardState(f"http://127.0.0.1:{port}", timeout=1.0)

    async def wait() -> tuple[BusyLedger, int]:
        async with asampling(state, BusyLedger(since=time.time()), interval=0.05) as ledger:
            await asyncio.sleep(0.3)
        return ledger, len(asyncio.all_tasks())

    ledger, tasks = asyncio.run(wait())
    assert tasks == 1 and ledger.samples == 0 and ledger.failures >= 3  # the last sample on the way out
    assert "did not answer" in (ledger.last_error or "")

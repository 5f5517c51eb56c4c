"""The usage record's rules without a cluster: prices, the figures from state rows (Ray 2.60's shapes),
the log line; the reads through a dashboard are in test_usage_dashboard.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch.usage import UsageOptions, parse_prices, usage_line
from airflow_ray_provider.launch.usage.record import (
    Node,
    Window,
    allocation,
    check_against_cluster,
    make_record,
    record_resources,
)

pytestmark = pytest.mark.unit

GIB = 1024**3
T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    ("prices", "field"),
    [
        ({"CPU": 0}, "prices['CPU']"),
        ({"CPU": -1.5}, "prices['CPU']"),
        ({"CPU": "0.05"}, "prices['CPU']"),
        ({"CPU": True}, "prices['CPU']"),
        ({"CPU": float("nan")}, "prices['CPU']"),
        ({"memory": 0.01}, "memory_gib"),
        ({"groups": {"spot": {"GPU": 0}}}, "prices['groups']['spot']['GPU']"),
        ({"currency": ""}, "prices['currency']"),
        ({}, "names no resource"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_bad_prices_are_refused_naming_the_field(prices: object, field: str) -> None:
    with pytest.raises(RayInvalidInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_prices(prices)


def test_price_for_a_resource_the_cluster_lacks_names_it() -> None:
    prices = parse_prices({"CPU": 0.05, "TPU": 3.0})
    assert prices is not None
    with pytest.raises(RayInvalidInputError, match=r"\['TPU'\].*does not have"):
        check_against_cluster(prices, {"headgroup": {"CPU", "memory_gib"}})
    group_prices = parse_prices({"CPU": 0.05, "groups": {"gpu": {"GPU": 2.0}}})
    assert group_prices is not None
    check_against_cluster(group_prices, {"headgroup": {"CPU"}})  # the group has no nodes yet
    with pytest.raises(RayInvalidInputError, match=r"\['groups'\]\['gpu'\] prices \['GPU'\]"):
        check_against_cluster(group_prices, {"gpu": {"CPU"}})


def test_resources_are_named_and_scaled_for_the_record() -> None:
    got = record_resources(
        {"CPU": 1.0, "memory": 2 * GIB, "node:10.0.0.1": 1.0, "object_store_memory": 5.0,
         "CPU_group_0_" + "ab" * 14: 0.5, "GPU": 0}
    )  # fmt: skip
    assert got == {"CPU": 1.5, "memory_gib": 2.0}


def _node(group: str = "headgroup", cpus: float = 2.0, gpus: float = 0.0, start: float | None = None) -> Node:
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return Node("n1" if group == "headgroup" else "n2", group, resources, start, None)


def _record(request: UsageOptions, start: float, end: float, **reads: Any) -> dict[str, Any]:
    """The record of a job the Job API says ran from ``start`` to ``end``, from what the dashboard told."""
    job = {"job_id": "02000000", "start_time": start * 1000, "end_time": end * 1000, **reads.pop("job", {})}
    return make_record(request, now=end, job=job, **reads)


def test_allocated_sums_task_and_actor_requests_times_their_run_time() -> None:
    window = Window(submitted=T0, ended=T0 + 100, driver_started=T0 + 4)
    ms = lambda s: (T0 + s) * 1000.0  # noqa: E731
    tasks = [
        {"type": "NORMAL_TASK", "node_id": "n1", "required_resources": {"CPU": 1.0},
         "start_time_ms": ms(10), "end_time_ms": ms(40)},
        {"type": "NORMAL_TASK", "node_id": "n2", "required_resources": {"CPU": 2.0},
         "start_time_ms": ms(10), "end_time_ms": None},  # still running: to the job's end
        {"type": "ACTOR_TASK", "node_id": "n1", "required_resources": {"CPU": 8.0},
         "start_time_ms": ms(10), "end_time_ms": ms(90)},  # inside its actor's allocation
        {"type": "NORMAL_TASK", "node_id": "n1", "required_resources": {"CPU": 1.0}, "start_time_ms": None},
    ]  # fmt: skip
    actors = [{"startTime": ms(20), "endTime": ms(56), "requiredResources": {"GPU": 1.0},
               "address": {"nodeId": "n2"}}]  # fmt: skip
    got = allocation(
        tasks=tasks, actors=actors, entrypoint={"CPU": 1.0}, window=window,
        node_groups={"n1": "headgroup", "n2": "gpu"},
    )  # fmt: skip
    assert got.tasks == 2 and got.actors == 1
    assert got.by_group["headgroup"]["CPU"] == pytest.approx((30 + 96) / 3600)  # task + entrypoint
    assert got.by_group["gpu"] == pytest.approx({"CPU": 2 * 90 / 3600, "GPU": 36 / 3600})


def test_a_task_whose_end_event_never_came_ends_at_its_workers_next_task_start() -> None:
    window = Window(submitted=T0, ended=T0 + 100, driver_started=T0)
    ms = lambda s: (T0 + s) * 1000.0  # noqa: E731
    task = {"type": "NORMAL_TASK", "node_id": "n1", "required_resources": {"CPU": 1.0}}
    tasks = [
        {**task, "worker_id": "w1", "start_time_ms": ms(30), "end_time_ms": ms(45)},
        {**task, "worker_id": "w1", "start_time_ms": ms(10), "end_time_ms": None},  # lost: ends at 30
        {**task, "worker_id": "w2", "start_time_ms": ms(20), "end_time_ms": None},  # lost, alone: to 100
        {**task, "worker_id": "w1", "start_time_ms": ms(60), "end_time_ms": None},  # lost, last on w1
    ]  # fmt: skip
    got = allocation(tasks=tasks, actors=[], entrypoint={}, window=window, node_groups={"n1": "headgroup"})
    assert got.tasks == 4
    assert got.by_group["headgroup"]["CPU"] == pytest.approx((15 + 20 + 80 + 40) / 3600)


def test_an_ended_task_whose_start_was_lost_counts_by_its_span_else_by_its_owner_else_is_named() -> None:
    window = Window(submitted=T0, ended=T0 + 100, driver_started=T0)
    ms = lambda s: (T0 + s) * 1000.0  # noqa: E731
    task = {"type": "NORMAL_TASK", "node_id": "n1", "required_resources": {"CPU": 1.0}, "state": "FINISHED"}
    span = {"event_name": "task:execute", "start_time": ms(10), "end_time": ms(16)}
    # the owner's states of an attempt whose worker's events Ray lost (as Ray 2.60 answers it)
    owner = [{"state": "PENDING_ARGS_AVAIL", "created_ms": ms(1)}, {"state": "PENDING_NODE_ASSIGNMENT",
             "created_ms": ms(1)}, {"state": "SUBMITTED_TO_WORKER", "created_ms": ms(30)},
             {"state": "FINISHED", "created_ms": ms(33)}]  # fmt: skip
    tasks = [
        {**task, "start_time_ms": None, "end_time_ms": ms(17), "profiling_data": {"events": [span]}},
        {**task, "start_time_ms": None, "end_time_ms": ms(33), "events": owner},  # 30 -> 33
        {**task, "start_time_ms": None, "end_time_ms": ms(20), "events": owner[:2]},  # never pushed: lost
        {**task, "state": "PENDING_NODE_ASSIGNMENT", "start_time_ms": None, "end_time_ms": None},
    ]  # fmt: skip
    got = allocation(tasks=tasks, actors=[], entrypoint={}, window=window, node_groups={"n1": "headgroup"})
    assert (got.tasks, got.untimed["tasks_timed_by_owner"], got.untimed["tasks_without_start"]) == (2, 1, 1)
    assert got.by_group["headgroup"]["CPU"] == pytest.approx((6 + 3) / 3600)


def test_record_on_own_cluster_reserves_every_node_and_prices_each_group() -> None:
    nodes = [_node(), _node("spot", cpus=4.0, start=T0 + 1800)]  # the spot node came half-way
    task = {"type": "NORMAL_TASK", "node_id": "n2", "required_resources": {"CPU": 4.0},
            "start_time_ms": (T0 + 1800) * 1000, "end_time_ms": (T0 + 3600) * 1000}  # fmt: skip
    prices = {"CPU": 0.10, "groups": {"spot": {"CPU": 0.02}}}
    request = UsageOptions(
        "one_task", "c", True, submission_id="s", prices=prices, task_started=T0, cluster_ready=T0 + 60
    )
    record = _record(request, T0 + 60, T0 + 3600, nodes=nodes, tasks=[task], actors=[])
    assert record["reserved"] == {"CPU": pytest.approx(2.0 + 2.0)}  # 2 CPU x 1 h + 4 CPU x 0.5 h
    assert record["allocated"] == {"CPU": pytest.approx(2.0)}
    assert record["cost"] is not None and record["cost"]["amount"] == pytest.approx(2.0 * 0.10 + 2.0 * 0.02)
    assert record["phases"]["waiting_for_cluster_s"] == 60 and record["phases"]["queued_s"] is None
    assert record["utilisation"] == {"allocated_cpu": 0.5, "allocated_gpu": None}
    assert usage_line(record) == "reserved 4.0 CPU-h, allocated 2.0 (50 %), ~$0.24"
    assert record["schema"] == "airflow-ray-usage/2"


def test_record_on_a_shared_cluster_reserves_the_job_requests_only() -> None:
    request = UsageOptions("standing", "shared", False, submission_id="s", entrypoint={"CPU": 1.0})
    record = _record(request, T0, T0 + 360, nodes=[_node(cpus=64)], tasks=[], actors=[])
    assert record["basis"] == "job requests" and record["reserved"] == {"CPU": pytest.approx(0.1)}
    assert record["cost"] is None and usage_line(record) == "reserved 0.10 CPU-h, allocated 0.10 (100 %)"


def test_a_job_whose_work_ray_did_not_count_shows_allocated_cpu_as_na_never_0_percent() -> None:
    """An in-process engine runs in the driver, which reserves no Ray resources: the job kept its cores
    busy, Ray's accounting saw nothing. The record says n/a and why, in the line and where reports look."""
    from airflow_ray_provider.launch.usage.record import DRIVER_NOT_COUNTED

    request = UsageOptions("one_task", "c", True, submission_id="s")
    record = _record(request, T0, T0 + 180, nodes=[_node()], tasks=[], actors=[])
    assert record["reserved"] == {"CPU": pytest.approx(0.1)} and "CPU" not in record["allocated"]
    assert record["not_available"]["allocated_cpu"] == DRIVER_NOT_COUNTED
    assert "set entrypoint_num_cpus to count it" in DRIVER_NOT_COUNTED
    assert record["utilisation"]["allocated_cpu"] is None
    assert record["utilisation"]["allocated_cpu"] is None
    assert usage_line(record) == f"reserved 0.10 CPU-h, allocated n/a ({DRIVER_NOT_COUNTED})"
    assert usage_line(json.loads(json.dumps(record))) == usage_line(record)  # what reports show
    # The entrypoint's reservation counts as allocated over the driver's run.
    reserved = _record(
        UsageOptions("one_task", "c", True, submission_id="s", entrypoint={"CPU": 1.0}), T0, T0 + 180,
        nodes=[_node()], tasks=[], actors=[],
    )  # fmt: skip
    assert (
        reserved["allocated"] == {"CPU": pytest.approx(0.05)}
        and "allocated_cpu" not in reserved["not_available"]
    )
    assert usage_line(reserved) == "reserved 0.10 CPU-h, allocated 0.050 (50 %)"
    # Tasks and actors that could not be read: n/a too, with that reason.
    unread = _record(request, T0, T0 + 180, nodes=[_node()])
    assert unread["not_available"]["allocated_cpu"] == "the job's tasks or actors could not be read"
    assert unread["utilisation"]["allocated_cpu"] is None


def test_the_price_table_of_docs_usage_md_is_valid() -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "usage.md").read_text()
    (block,) = re.findall(r"```json\n(.*?)```", doc, flags=re.S)
    prices = parse_prices(json.loads(block))
    assert prices is not None and prices.groups["spot-workers"]["CPU"] == 0.015


def test_teardown_is_the_time_from_the_jobs_end_to_the_cluster_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from airflow_ray_provider.launch.usage import observer

    request = UsageOptions("one_task", "c", True, submission_id="s", teardown_note="not yet")
    record = _record(request, T0, T0 + 100, nodes=[_node()])
    assert record["phases"]["teardown_s"] is None and record["times"]["ended"] == T0 + 100
    run = SimpleNamespace(record=record)
    monkeypatch.setattr(observer.time, "time", lambda: T0 + 112.5)  # the cluster is gone at T0 + 112.5
    observer.deleted(run)  # type: ignore[arg-type]
    done = run.record
    assert done["phases"]["teardown_s"] == 12.5 and "teardown" not in done["not_available"]
    assert record["phases"]["teardown_s"] is None  # the record given is not changed


def test_a_timed_out_job_gets_a_record_whose_line_says_so() -> None:
    request = UsageOptions("standing", "c", False, submission_id="s", ended_by="timed_out")
    record = _record(request, T0, T0 + 36, nodes=[], job={"status": "STOPPED"})
    assert record["ended_by"] == "timed_out" and record["job_status"] == "STOPPED"
    assert usage_line(record).startswith("[job timed out, STOPPED] reserved 0 CPU-h")


def test_prices_are_checked_against_the_spec_of_a_rayjobs_cluster() -> None:
    from airflow_ray_provider.kuberay import RayClusterSpec
    from airflow_ray_provider.kuberay.spec import WorkerGroup
    from airflow_ray_provider.operators.kuberay_job import check_prices_on_spec

    spec = RayClusterSpec(worker_groups=[WorkerGroup(name="gpu", gpu=1)])
    ok = parse_prices({"CPU": 0.05, "GPU": 2.0, "groups": {"gpu": {"GPU": 1.2}}})
    assert ok is not None
    check_prices_on_spec(ok, spec)
    no_gpu = parse_prices({"CPU": 0.05, "GPU": 2.0})
    assert no_gpu is not None
    with pytest.raises(RayInvalidInputError, match=r"\['GPU'\].*does not have"):
        check_prices_on_spec(no_gpu, RayClusterSpec())

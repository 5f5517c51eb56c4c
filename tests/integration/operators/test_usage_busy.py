"""The usage record's busy CPU on a real local head: a job whose two tasks burn known CPU (Job API, in the
worker and deferred; and as a RayJob through the emulator, the test controller lending this head).

The head's reporter sends process stats every second here (``REPORTER_UPDATE_INTERVAL_MS=1000``; Ray's
default is 5 s), so the figure's lower-bound gap (what a process burnt after its last report) is at most
about a second per process. The tasks measure their own CPU (``time.process_time``, start-up included);
the record's busy figure must be within that gap (and a pre-started worker's start-up) below it and,
above it, at most the start-up CPU of the job's other processes (supervisor, driver).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.ray_job import StandInTI, context_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: Two tasks, each spinning until it has burnt 5 CPU-seconds by its own clock (``process_time``).
JOB = """
import json, time, ray
ray.init()
burn = ray.remote(num_cpus=1)(lambda cpu_s: next(t for t in iter(time.process_time, None) if t >= cpu_s))
print("BUSY-TEST " + json.dumps({"cpu_s": sum(ray.get([burn.remote(5.0), burn.remote(5.0)]))}), flush=True)
"""
REPORT_S = 1.0
#: CPU seconds the job's processes spend starting (imports of the workers, the supervisor and the driver).
STARTUP_CPU_S = 6.0


@pytest.fixture(scope="module")
def busy_head() -> Iterator[Any]:
    """A 2-CPU head whose reporter sends process stats every second, stopped at the module's end."""
    from airflow_ray_provider.local import LocalHeadConfig, start_head, stop_head

    env = {"REPORTER_UPDATE_INTERVAL_MS": str(int(REPORT_S * 1000))}
    info = start_head(LocalHeadConfig(num_cpus=2, auth=True, env=env), name="usage-busy")
    try:
        yield info
    finally:
        stop_head(info)


def _operator(head: Any, **kwargs: Any) -> Any:
    from airflow_ray_provider.clusters.handle import RayClusterHandle
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    handle = RayClusterHandle(
        backend="local", name=head.name, dashboard_url=head.dashboard_url, auth_token_file=head.token_file
    ).to_dict()
    return SubmitRayJobOperator(
        task_id="submit", cluster=handle, entrypoint=["python", "-c", JOB], poll_interval=0.2, **kwargs
    )


def _until_reporting(op: Any, deadline_s: float = 60.0) -> None:
    """The reporter's first payload comes some seconds after the head is up: wait for it."""
    from airflow_ray_provider.launch.usage.busy import DUMP_ROUTE

    state = op.hook.dashboard_state()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        nodes = (state.get(DUMP_ROUTE).get("data") or {}).get("nodePhysicalStats") or {}
        if any(stats.get("workers") for stats in nodes.values()):
            return
        time.sleep(0.5)
    pytest.fail("the head's reporter sent no process stats within a minute")


def test_busy_is_the_cpu_the_jobs_tasks_burnt_within_the_sampling_gap(busy_head: Any) -> None:
    op = _operator(busy_head)
    _until_reporting(op)
    ti = StandInTI(dag_id=f"usage_busy_{uuid.uuid4().hex[:6]}")
    result = op.execute(context_for(ti))
    _check_busy(op, ti.xcoms["usage"], result["submission_id"])


def test_a_deferred_task_samples_busy_in_the_trigger_and_its_event_carries_it(busy_head: Any) -> None:
    """The deferred path as the triggerer runs it: the trigger built from its serialised kwargs, its
    event through JSON, ``execute_complete`` making the record from the ledger the event carried."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    op = _operator(busy_head, deferrable=True)
    _until_reporting(op)
    ti = StandInTI(dag_id=f"usage_busy_deferred_{uuid.uuid4().hex[:6]}")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context_for(ti))
    carried = deferred.value.trigger
    trigger = type(carried)(**json.loads(json.dumps(carried.serialize()[1])))

    async def first_event() -> dict[str, Any]:
        events = trigger.run()
        try:
            return dict((await anext(events)).payload)
        finally:
            await events.aclose()  # its hook closed; the sampling task already ended with the wait

    payload = json.loads(json.dumps(asyncio.run(first_event())))  # what the triggerer stores
    assert payload["status"] == "done" and payload["busy"]["samples"] >= 1, payload
    result = op.execute_complete(context_for(ti), payload)
    _check_busy(op, ti.xcoms["usage"], result["submission_id"])


def _check_busy(op: Any, record: dict[str, Any], submission_id: str) -> None:
    text = op.hook.get_logs(submission_id)
    burnt = json.loads(re.search(r"^BUSY-TEST (\{.*\})$", text, re.M).group(1))["cpu_s"]  # type: ignore[union-attr]

    busy_s = record["busy_cpu_hours"] * 3600
    print(f"BUSY-FIGURES burnt {burnt:.2f} CPU-s, busy {busy_s:.2f} CPU-s")  # for the docs' figures
    # below: per task worker, what it burnt after its last report (<= REPORT_S, plus the report's own
    # delay) and, for a worker Ray had started before the job, its start-up (not this job's)
    assert burnt - 2 * (REPORT_S + 1.0) <= busy_s <= burnt + STARTUP_CPU_S, (busy_s, burnt, record)
    assert "lower bound" in record["not_available"]["busy_lower_bound"]
    assert "busy" not in record["not_available"]
    assert record["utilisation"]["busy_cpu"] == pytest.approx(
        record["busy_cpu_hours"] / record["reserved"]["CPU"], abs=1e-3
    )
    assert re.search(r", busy [0-9.]+ \(\d+ %\)", _line(record)), _line(record)


def _line(record: dict[str, Any]) -> str:
    from airflow_ray_provider.operators.usage import usage_line

    return usage_line(record)


def test_a_rayjob_through_the_emulator_gets_a_sized_busy_figure_from_samples_between_looks(
    busy_head: Any,
    kuberay_controller: Any,
    rayjob_controller: Any,
    kuberay_conn: str,
    rayjobs: Any,
    capfd: Any,
) -> None:
    """RayJob mode (the official client, the emulator, the test KubeRay controllers) on this module's
    head: looks 4 s apart, busy sampled every 2 s between them from the worker's thread; the same bounds
    as the Job API's."""
    import sys

    from airflow_ray_provider.local import read_token
    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
    from tests.fixtures.kuberay import HEAD_MODE

    op = _operator(busy_head)
    _until_reporting(op)
    spec = {"annotations": {HEAD_MODE: "busy"}}
    rayjob = KubeRayJobOperator(
        task_id="busy_rayjob", cluster_conn_id=kuberay_conn, spec=spec,
        entrypoint=[sys.executable, "-c", JOB], poll_interval=4.0, ttl_seconds_after_finished=0,
    )  # fmt: skip
    ti = StandInTI(dag_id=f"usage_busy_rayjob_{uuid.uuid4().hex[:6]}")
    with kuberay_controller.lending("busy", busy_head, read_token(busy_head.token_file)):
        result = rayjob.execute(context_for(ti))
    record = ti.xcoms["usage"]
    assert result["status"] == "SUCCEEDED" and record["mode"] == "rayjob"
    text = capfd.readouterr()
    burnt = json.loads(re.search(r"BUSY-TEST (\{.*\})", text.out + text.err).group(1))["cpu_s"]  # type: ignore[union-attr]
    busy_s = record["busy_cpu_hours"] * 3600
    print(f"BUSY-FIGURES rayjob burnt {burnt:.2f} CPU-s, busy {busy_s:.2f} CPU-s")
    assert burnt - 2 * (REPORT_S + 1.0) <= busy_s <= burnt + STARTUP_CPU_S, (busy_s, burnt, record)
    assert rayjob._watch.usage.busy.samples >= 3  # the looks while it ran and the samples between them

"""SubmitRayJobOperator inside real Airflow (``dag.test()`` on SQLite): XCom, extra link, deferral,
and re-attaching after a worker is killed mid-wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pendulum
import pytest

from airflow_ray_provider.hooks.ray_job import LOG_PREFIX
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from tests.fixtures.dag_runs import task_states as ti_states
from tests.fixtures.dag_runs import write_dag_module
from tests.fixtures.dag_runs import xcom_value as xcom_of
from tests.fixtures.ray_job import job_ids_for

pytestmark = pytest.mark.integration
WHEN = pendulum.datetime(2024, 1, 3, tz="UTC")
RUN_ID = "manual__2024-01-03T00:00:00+00:00"  # dag.test(logical_date=WHEN, run_after=WHEN)


def _dag_source(dag_id: str, conn_id: str, entrypoint: str, **op_kwargs: object) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in op_kwargs.items())
    return f"""
import pendulum
from airflow.sdk import DAG
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:
    SubmitRayJobOperator(task_id="submit", ray_conn_id={conn_id!r}, entrypoint={entrypoint!r},
                         poll_interval=0.3{extra})
"""


def _ui_link(dag_run) -> str:
    """The extra link as the API server computes it (from the serialised operator's XCom key)."""
    from airflow.serialization.definitions.operatorlink import XComOperatorLink

    from airflow_ray_provider.operators.base import RayJobLink

    ti = dag_run.get_task_instance("submit")
    return XComOperatorLink(name=RayJobLink.name, xcom_key=RayJobLink().xcom_key).get_link(
        None, ti_key=ti.key
    )


def _streamed(text: str) -> list[str]:
    return [
        line.split(LOG_PREFIX, 1)[1].split(" [airflow")[0].strip()
        for line in text.splitlines()
        if LOG_PREFIX in line
    ]


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_dag_run_succeeds_with_xcom_link_and_streamed_log(
    deferrable, airflow_db, ray_conn_id, job_prefix, capfd
):
    code = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.5)"
    module = write_dag_module(
        job_prefix, _dag_source(job_prefix, ray_conn_id, ["python", "-u", "-c", code], deferrable=deferrable)
    )
    dag_run = module.dag.test(logical_date=WHEN, run_after=WHEN)
    text = "".join(capfd.readouterr())
    assert ti_states(dag_run) == {"submit": "success"}
    result = xcom_of(dag_run, "submit")
    assert result["submission_id"] == base_submission_id(job_prefix, RUN_ID, "submit")
    assert result["status"] == "SUCCEEDED" and result["job_url"].startswith(result["dashboard_url"])
    assert xcom_of(dag_run, "submit", "ray_job_url") == result["job_url"]
    assert _ui_link(dag_run) == result["job_url"]
    assert [line for line in _streamed(text) if line.startswith("tick")] == [f"tick {i}" for i in range(4)]
    if deferrable:
        assert "RayJobTrigger" in text  # it really went through the trigger


_CRASH_DRIVER = """
import importlib.util, sys, pendulum
spec = importlib.util.spec_from_file_location(sys.argv[1], sys.argv[2])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
when = pendulum.datetime(2024, 1, 3, tz="UTC")
module.dag.test(logical_date=when, run_after=when)
"""


def test_reattach_after_worker_crash_runs_exactly_one_job(
    airflow_db, ray_conn_id, ray_job_hook, job_prefix, tmp_path
):
    entrypoint = (
        "python -u -c \"import time; print('crash-test running', flush=True); time.sleep(6); print('done')\""
    )
    module = write_dag_module(job_prefix, _dag_source(job_prefix, ray_conn_id, entrypoint))
    sid = base_submission_id(job_prefix, RUN_ID, "submit")
    driver = tmp_path / "driver.py"
    driver.write_text(_CRASH_DRIVER)
    worker = subprocess.Popen(
        [sys.executable, str(driver), job_prefix, module.__file__],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        while (state := ray_job_hook.get_job(sid)) is None or state.status is not JobStatus.RUNNING:
            assert worker.poll() is None, "the worker exited before its job ran"
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.3)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker dies mid-wait; its job keeps running
        worker.wait(30)
    dag_run = module.dag.test(logical_date=WHEN, run_after=WHEN)  # the same task instance again
    assert ti_states(dag_run) == {"submit": "success"}
    assert xcom_of(dag_run, "submit")["submission_id"] == sid
    assert job_ids_for(ray_job_hook, job_prefix) == [sid]  # re-attached, no duplicate
    assert "done" in ray_job_hook.get_logs(sid)

"""``@task.ray`` on a real Ray head inside real Airflow (``dag.test()`` on SQLite), and on the KubeRay
emulator: values come back as XComs (JSON through the job log, a DataFrame through a result URI), the
function can use Ray, a remote error fails the task with its traceback, and a retried task re-attaches
(or returns its succeeded job's value) without running the function twice."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_ray_provider.exceptions import RayTaskError, RayTaskFunctionError
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from tests.fixtures.dag_runs import load_dag, run_dag, task_states, write_dag_module, xcom_value
from tests.fixtures.kuberay import HEAD_MODE
from tests.fixtures.ray_job import StandInTI, context_for, job_ids_for

pytestmark = pytest.mark.integration
WHEN = pendulum.datetime(2024, 1, 3, tz="UTC")
RUN_ID = "manual__2024-01-03T00:00:00+00:00"  # dag.test(logical_date=WHEN, run_after=WHEN)
REPO = Path(__file__).resolve().parents[3]


def test_shipped_example_returns_a_number_and_a_dataframe_downstream(
    dags_folder, ray_conn_id, ray_job_hook, tmp_path, monkeypatch
):
    monkeypatch.setenv("AIRFLOW_RAY_CONN_ID", ray_conn_id)  # the session's head: no cluster to start
    monkeypatch.setenv("AIRFLOW_RAY_DATA_ROOT", str(tmp_path))
    target = dags_folder / "ray_taskflow.py"
    target.write_text((REPO / "dags" / "ray_taskflow.py").read_text())
    dag = load_dag(target)

    dag_run = run_dag(dag, logical_date=WHEN, run_after=WHEN)

    assert task_states(dag_run) == dict.fromkeys(("extract", "mean_squared", "bucketed", "report"), "success")
    values = [12.5, 3.0, 7.25, 9.0, 1.5, 4.75]
    assert xcom_value(dag_run, "mean_squared") == pytest.approx(sum(v * v for v in values) / len(values))
    from airflow.sdk.serde import deserialize

    frame = deserialize(xcom_value(dag_run, "bucketed"))  # the metadata DB holds Airflow's serde form
    assert list(frame["bucket"].astype(str)) == ["low", "mid", "high"]
    assert list(frame["count"]) == [3, 2, 1]
    summary = xcom_value(dag_run, "report")
    assert summary["buckets"][2] == {"bucket": "high", "count": 1, "mean": 12.5}
    sid = base_submission_id("ray_taskflow", RUN_ID, "bucketed")
    assert (tmp_path / "ray_task_results" / sid / "return_value.pkl").is_file()  # through the URI


ROUND_TRIP_DAG = """
import pendulum
from airflow.sdk import DAG, task

OPTIONS = {{"ray_conn_id": {conn!r}, "poll_interval": 0.3}}

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:

    @task
    def extract():
        return {{"values": [1, 2, 3, 4], "label": "zone-7"}}

    @task.ray(**OPTIONS)
    def describe(data, ds=None):
        return {{"n": len(data["values"]), "label": data["label"], "ds": ds, "flags": [True, None]}}

    @task.ray(**OPTIONS, deferrable=True)
    def deferred_count(data):
        return len(data["values"]) * 10

    @task.ray(**OPTIONS)
    def broken(data):
        def check(values):
            raise ValueError(f"negative total in {{data['label']}}")
        return check(data["values"])

    data = extract()
    describe(data)
    deferred_count(data)
    broken(data)
"""


def test_values_round_trip_deferral_and_a_remote_error(dags_folder, ray_conn_id, job_prefix, capfd):
    module = write_dag_module(job_prefix, ROUND_TRIP_DAG.format(dag_id=job_prefix, conn=ray_conn_id))

    dag_run = run_dag(module.dag, logical_date=WHEN, run_after=WHEN)
    output = "".join(capfd.readouterr())

    assert task_states(dag_run) == {
        "extract": "success", "describe": "success", "deferred_count": "success", "broken": "failed",
    }  # fmt: skip
    described = {"n": 4, "label": "zone-7", "ds": "2024-01-03", "flags": [True, None]}
    assert xcom_value(dag_run, "describe") == described
    assert xcom_value(dag_run, "deferred_count") == 40
    assert "RayJobTrigger" in output  # the deferrable task really waited in the trigger
    assert "the @task.ray function raised ValueError: negative total in zone-7" in output
    assert 'in check\n    raise ValueError(f"negative total' in output  # the remote traceback


def _op(task_id: str, conn_id: str, function: Any, **kwargs: Any) -> Any:
    from airflow_ray_provider.decorators.ray_task import RayTaskOperator

    return RayTaskOperator(
        task_id=task_id, python_callable=function, ray_conn_id=conn_id, poll_interval=0.3, **kwargs
    )


def _helper(values: list[int]) -> int:
    raise KeyError(f"missing {len(values)}")


def _fails(values: list[int]) -> int:
    return _helper(values)


def _token() -> str:
    import uuid

    return uuid.uuid4().hex


def test_a_remote_exception_carries_its_type_message_and_traceback(ray_conn_id, job_prefix):
    op = _op("fails", ray_conn_id, _fails, op_args=[[1, 2]])
    with pytest.raises(RayTaskFunctionError) as excinfo:
        op.execute(context_for(StandInTI(job_prefix, task_id="fails")))
    error = excinfo.value
    assert (error.remote_type, error.remote_message) == ("KeyError", "'missing 2'")
    assert "in _helper" in error.remote_traceback and "in _fails" in error.remote_traceback
    assert "driver.py" not in error.remote_traceback  # the driver's own frames are left out


def test_an_interpreter_mismatch_fails_in_the_job_naming_both_sides(ray_conn_id, job_prefix, monkeypatch):
    from airflow_ray_provider.workloads.function import runtime_versions

    job_side = runtime_versions()
    module = importlib.import_module("airflow_ray_provider.decorators.ray_task")  # not the function
    monkeypatch.setattr(module, "runtime_versions", lambda: {"python": "3.9", "cloudpickle": "2.2.1"})
    with pytest.raises(RayTaskError) as excinfo:
        _op("mismatch", ray_conn_id, _token).execute(context_for(StandInTI(job_prefix, task_id="mismatch")))
    error = excinfo.value
    assert error.stage == "setup" and error.remote_type.endswith("InterpreterMismatchError")
    assert "pickled by Python 3.9 with cloudpickle 2.2.1" in str(error)
    assert f"runs Python {job_side['python']} with cloudpickle {job_side['cloudpickle']}" in str(error)


def test_a_retry_after_success_returns_the_same_value_without_a_second_job(
    ray_conn_id, ray_job_hook, job_prefix
):
    ti = StandInTI(job_prefix, task_id="token")
    first = _op("token", ray_conn_id, _token).execute(context_for(ti))
    again = _op("token", ray_conn_id, _token).execute(context_for(ti))  # a retry of the same instance

    assert isinstance(first, str) and len(first) == 32
    assert again == first
    assert job_ids_for(ray_job_hook, job_prefix) == [base_submission_id(job_prefix, ti.run_id, "token")]


KILL_DAG = """
import pendulum
from airflow.sdk import DAG, task

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:

    @task.ray(ray_conn_id={conn!r}, poll_interval=0.3)
    def slow():
        import time, uuid
        print("slow function started", flush=True)
        time.sleep(6)
        return uuid.uuid4().hex

    slow()
"""

_WORKER = """
import importlib.util, sys, pendulum
spec = importlib.util.spec_from_file_location(sys.argv[1], sys.argv[2])
module = importlib.util.module_from_spec(spec)
sys.modules[sys.argv[1]] = module
spec.loader.exec_module(module)
when = pendulum.datetime(2024, 1, 3, tz="UTC")
module.dag.test(logical_date=when, run_after=when)
"""


def test_kill_and_rerun_returns_the_value_of_the_one_job(
    dags_folder, ray_conn_id, ray_job_hook, job_prefix, tmp_path
):
    """A worker SIGKILLed while its job runs has already removed the staged package; the next try of
    the same task instance re-attaches to that job and returns its value (the function ran once)."""
    module = write_dag_module(job_prefix, KILL_DAG.format(dag_id=job_prefix, conn=ray_conn_id))
    sid = base_submission_id(job_prefix, RUN_ID, "slow")
    worker_file = tmp_path / "worker.py"
    worker_file.write_text(_WORKER)
    worker_log = tmp_path / "worker.log"
    worker_tmp = tmp_path / "worker-tmp"  # where the worker stages the call's package
    worker_tmp.mkdir()
    with worker_log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, str(worker_file), job_prefix, module.__file__],
            start_new_session=True, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "TMPDIR": str(worker_tmp)},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        while (state := ray_job_hook.get_job(sid)) is None or state.status is not JobStatus.RUNNING:
            assert worker.poll() is None, (
                f"the worker exited before its job ran:\n{worker_log.read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.3)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker dies mid-wait; the job keeps running
        worker.wait(30)

    # the package went right after the submission, not at the end of the (killed) task
    assert not list(worker_tmp.glob("arp-task-*")), "the killed worker left its staged package"
    dag_run = run_dag(module.dag, logical_date=WHEN, run_after=WHEN)  # the same task instance again

    assert task_states(dag_run) == {"slow": "success"}
    value = xcom_value(dag_run, "slow")
    assert isinstance(value, str) and len(value) == 32
    assert job_ids_for(ray_job_hook, job_prefix) == [sid]  # re-attached: one job, one run of the function
    assert ray_job_hook.get_logs(sid).count("slow function started") == 1


ONE_TASK_DAG = """
import pendulum
from airflow.sdk import DAG, task

SHARED = {{"annotations": {{{head_mode!r}: "shared"}}}}

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:

    @task.ray(cluster_conn_id={conn!r}, cluster_spec=SHARED, poll_interval=0.3, ready_timeout=60)
    def on_its_own_cluster(x):
        import ray
        return {{"x": x, "cpus": ray.cluster_resources().get("CPU", 0) > 0}}

    on_its_own_cluster(21)
"""


def test_one_task_on_kuberay_returns_the_value_and_leaves_no_cluster(
    airflow_db, kuberay_controller, kuberay_conn, kuberay_client
):
    from airflow_ray_provider.kuberay import LABEL_DAG_ID, matches

    dag_id = "ray_task_one_task"
    source = ONE_TASK_DAG.format(dag_id=dag_id, conn=kuberay_conn, head_mode=HEAD_MODE)
    module = write_dag_module(dag_id, source)

    dag_run = run_dag(module.dag)

    assert task_states(dag_run) == {"on_its_own_cluster": "success"}
    assert xcom_value(dag_run, "on_its_own_cluster") == {"x": 21, "cpus": True}
    left = [o for o in kuberay_client.list_labelled() if matches(o, {LABEL_DAG_ID: dag_id})]
    assert left == []

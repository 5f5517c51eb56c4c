"""One-task mode on the local backend end to end: ``dag.test()`` of ``EphemeralRayJobOperator`` with no
connection starts a real local Ray head in the task, runs the job (waiting in the worker, or deferred to
the triggerer) and stops the head in the same task, on success and on failure."""

from __future__ import annotations

import pytest

from tests.fixtures.dag_runs import run_dag, task_states, write_dag, xcom_value

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ONE_TASK_DAG = """
import sys
from datetime import datetime

from airflow.sdk import DAG

from airflow_ray_provider.operators.ephemeral_job import EphemeralRayJobOperator

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    EphemeralRayJobOperator(
        task_id="waits", local_options={{"num_cpus": 1}}, poll_interval=0.5,
        entrypoint=[sys.executable, "-c", "print('one task, local head')"],
    )
    EphemeralRayJobOperator(
        task_id="deferred", local_options={{"num_cpus": 1}}, poll_interval=0.5, deferrable=True,
        entrypoint=[sys.executable, "-c", "print('deferred, local head')"],
    )
    EphemeralRayJobOperator(
        task_id="fails", local_options={{"num_cpus": 1}}, poll_interval=0.5,
        entrypoint=[sys.executable, "-c", "import sys; sys.exit(3)"],
    )
"""


def test_one_task_mode_on_the_local_backend_runs_and_stops_its_heads(airflow_db, local_registry):
    from airflow_ray_provider.local import list_clusters

    dag_run = run_dag(write_dag("one_task_local", ONE_TASK_DAG.format(dag_id="one_task_local")))

    assert task_states(dag_run) == {"waits": "success", "deferred": "success", "fails": "failed"}
    assert xcom_value(dag_run, "waits")["status"] == xcom_value(dag_run, "deferred")["status"] == "SUCCEEDED"
    assert list_clusters() == []  # every head stopped and unregistered, also the failed task's
    assert not any(local_registry.glob("*.json"))

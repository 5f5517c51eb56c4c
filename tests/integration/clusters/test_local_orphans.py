"""Local heads nothing else would stop: the janitor stops those whose DAG run is gone or finished, and
``airflow-ray clusters delete NAME`` stops one by name. Real local Ray heads throughout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.dag_runs import run_dag, task_states, write_dag, xcom_value

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JANITOR_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_ray_provider.operators.ray_cluster import (
    CreateRayClusterOperator, DeleteRayClusterOperator, RayClusterJanitorOperator,
)

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    create = CreateRayClusterOperator(task_id="create", local_options={{"num_cpus": 1}})
    janitor = RayClusterJanitorOperator(task_id="janitor")
    delete = DeleteRayClusterOperator(task_id="delete", cluster=create.output)
    create >> janitor >> delete.as_teardown(setups=create)
"""


def _start_head(dag_id: str, run_id: str) -> Any:
    """What ``airflow tasks test DAG create DATE`` leaves: a head whose (temporary) run is gone."""
    from airflow_ray_provider.clusters import ClusterRequest, LocalBackend, TaskIdentity
    from airflow_ray_provider.clusters.local import find_cluster

    backend = LocalBackend()
    request = ClusterRequest.from_arguments(spec=None, local_options={"num_cpus": 1})
    plan = backend.plan(request, TaskIdentity(dag_id, run_id, "create_cluster"))
    backend.ensure(plan)
    return find_cluster(plan.name)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "airflow_ray_provider.cli", "clusters", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_janitor_stops_heads_whose_dag_run_is_gone_and_keeps_running_runs(airflow_db, local_registry):
    from airflow_ray_provider.clusters.local import stop_cluster
    from airflow_ray_provider.local import is_running

    orphan = _start_head("tasks_test_dag", "manual__2026-11-28T00:00:00+00:00")
    try:
        dag_run = run_dag(write_dag("janitor_orphans", JANITOR_DAG.format(dag_id="janitor_orphans")))

        assert task_states(dag_run) == {"create": "success", "janitor": "success", "delete": "success"}
        assert xcom_value(dag_run, "janitor") == [orphan.name]  # not the running run's own head
        assert not is_running(orphan) and not Path(orphan.temp_dir).exists()
        assert xcom_value(dag_run, "delete")["deleted"] is True  # the run's head was alive until teardown
    finally:
        stop_cluster(orphan)


def test_a_documented_command_lists_and_stops_a_named_head(local_registry):
    from airflow_ray_provider.clusters.local import stop_cluster
    from airflow_ray_provider.local import is_running

    head = _start_head("tasks_test_dag", "manual__cli")
    try:
        listed = _cli("list")
        assert listed.returncode == 0 and head.name in listed.stdout
        assert "run tasks_test_dag/manual__cli" in listed.stdout

        assert "expires 20" in listed.stdout  # its ISO expiry

        stopped = _cli("delete", head.name)

        assert stopped.returncode == 0, stopped.stderr
        assert not is_running(head) and not Path(head.temp_dir).exists()
        missing = _cli("delete", head.name)
        assert missing.returncode == 2 and "no local Ray head named" in missing.stderr
    finally:
        stop_cluster(head)

"""The shipped DAGs in RayJob mode: ``dag.test()`` through the Kubernetes emulator and the test KubeRay.

``AIRFLOW_RAY_MODE=rayjob`` with a ``kuberay`` connection turns every Ray job of both templates into a
``KubeRayJobOperator`` (no create/delete tasks: KubeRay creates each job's cluster and deletes it). The
clusters use the session's shared Ray head (``test.kuberay/head: shared``, through
``AIRFLOW_RAY_CLUSTER_SPEC``) and Airflow's interpreter (``AIRFLOW_RAY_PYTHON``), so a run costs seconds.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.dag_runs import load_dag, run_dag, task_states, xcom_value
from tests.fixtures.kuberay import HEAD_MODE, TEST_NAMESPACE
from tests.fixtures.templates import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

#: A date no other module's run of the shipped DAGs uses. ``dag.test()`` deletes an earlier run of the
#: same DAG and date, and where the worker's DB also holds that DAG's ephemeral-mode structure (another
#: serialized version), Airflow's delete loads ``DagRun.serialized_dag`` and warns (SAWarning).
DS = "2026-11-29"


@pytest.fixture
def rayjob_env(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kube_emulator: Any,
    kuberay_conn: str,
    rayjob_controller: Any,
) -> Iterator[Path]:
    """The shipped DAGs' environment in RayJob mode; deletes the RayJobs the run made."""
    from airflow_ray_provider.kuberay import KubeRayClient, RayJobClient

    root = tmp_path / "data"
    for name in ("AIRFLOW_RAY_CONN_ID", "AIRFLOW_RAY_SAMPLE_DATA", "AIRFLOW_RAY_CLUSTER_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_RAY_DATA_ROOT", str(root))
    monkeypatch.setenv("AIRFLOW_RAY_EVAL_ROWS", "12000")
    monkeypatch.setenv("AIRFLOW_RAY_MODE", "rayjob")
    monkeypatch.setenv("AIRFLOW_RAY_CLUSTER_CONN_ID", kuberay_conn)
    monkeypatch.setenv("AIRFLOW_RAY_CLUSTER_SPEC", json.dumps({"annotations": {HEAD_MODE: "shared"}}))
    monkeypatch.setenv("AIRFLOW_RAY_PYTHON", sys.executable)
    yield root
    api = kube_emulator.api_client()
    client = RayJobClient(KubeRayClient(api, namespace=TEST_NAMESPACE))
    for item in client.list_labelled():
        client.delete(item["metadata"]["name"])
    api.close()


def _rayjob_tasks(dag: Any) -> set[str]:
    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator

    return {t.task_id for t in dag.tasks if isinstance(t, KubeRayJobOperator)}


def test_nightly_dag_in_rayjob_mode_evaluates_and_decides(
    dags_folder: Path, rayjob_env: Path, rayjob_controller: Any
) -> None:
    path = Path(shutil.copy(REPO_ROOT / "dags" / "nightly_model_validation.py", dags_folder))
    dag = load_dag(path)
    assert _rayjob_tasks(dag) == {"prepare", "evaluate"}
    assert not {"create_cluster", "delete_cluster"} & set(dag.task_ids)

    dag_run = run_dag(dag, DS)

    states = task_states(dag_run)
    assert dag_run.state == "success", states
    evaluate = xcom_value(dag_run, "evaluate")
    assert (evaluate["status"], evaluate["deployment_status"]) == ("SUCCEEDED", "Complete")
    assert evaluate["rayjob_name"] not in rayjob_controller.invalid  # KubeRay and the strict CRD accept it
    assert xcom_value(dag_run, "decide")["outcome"] == "promote"
    assert (rayjob_env / "validation" / DS / "_SUCCESS").exists()


def test_zone_dag_in_rayjob_mode_trains_every_application(
    dags_folder: Path, rayjob_env: Path, rayjob_controller: Any
) -> None:
    path = Path(shutil.copy(REPO_ROOT / "dags" / "zone_training.py", dags_folder))
    dag = load_dag(path)
    assert _rayjob_tasks(dag) == {"application.prepare", "application.train", "application.retry_failed"}
    assert "application.create_cluster" not in dag.task_ids

    dag_run = run_dag(dag, DS)

    states = task_states(dag_run)
    assert dag_run.state == "success", states
    for index in (0, 1):
        train = xcom_value(dag_run, "application.train", map_index=index)
        assert train["status"] == "SUCCEEDED" and train["rayjob_name"] not in rayjob_controller.invalid
        result = xcom_value(dag_run, "application.result", map_index=index)
        assert result["failed"] == 0 and result["succeeded"] == 40
    names = {xcom_value(dag_run, "application.train", map_index=i)["rayjob_name"] for i in (0, 1)}
    assert len(names) == 2  # one RayJob (and cluster) per application

"""The shipped laptop example: the same entrypoint and working dir from ``airflow-ray run`` and from a DAG."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.dag_runs import load_dag_module, run_dag, task_states, xcom_value

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).parents[2]
JOB_DIR = REPO_ROOT / "dags" / "laptop_job"
MARKER = "sum of squares: 285"


def test_the_laptop_command_runs_the_job(tmp_path: Path):
    env = {**os.environ, "AIRFLOW_RAY_LOCAL_REGISTRY": str(tmp_path), "RAY_USAGE_STATS_ENABLED": "0"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_ray_provider.cli",
            "run",
            "--local",
            "--working-dir",
            str(JOB_DIR),
            "--",
            "python",
            "job.py",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert MARKER in out.stdout
    assert not list(tmp_path.glob("*.json"))  # its cluster is gone


def test_the_dag_runs_the_same_job_unchanged(dags_folder: Path, capfd: pytest.CaptureFixture[str]):
    shutil.copytree(JOB_DIR, dags_folder / "laptop_job", dirs_exist_ok=True)
    path = Path(shutil.copy(REPO_ROOT / "dags" / "launch_from_laptop.py", dags_folder))
    module = load_dag_module(path)
    assert module.ENTRYPOINT == ["python", "job.py"] and module.JOB_DIR.name == JOB_DIR.name
    dag_run = run_dag(module.dag)
    assert task_states(dag_run) == {"run_job": "success"}
    assert xcom_value(dag_run, "run_job")["status"] == "SUCCEEDED"
    assert MARKER in capfd.readouterr().out

"""The local backend under ``dag.test()``: create -> (failing) work -> teardown, and no process left."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil
import pytest

from tests.fixtures.dag_runs import task_states, xcom_value
from tests.fixtures.dag_runs import write_dag as write_dag_file

DAG_SOURCE = """
from datetime import datetime
from types import SimpleNamespace

from airflow.sdk import DAG, get_current_context, task

from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

OUT = {out!r}

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    create = CreateRayClusterOperator(task_id="create", local_options={{"num_cpus": 1}})

    @task
    def work(handle):
        import json, urllib.request
        from pathlib import Path

        token = Path(handle["auth_token_file"]).read_text().strip()
        request = urllib.request.Request(
            handle["dashboard_url"] + "/api/version", headers={{"Authorization": "Bearer " + token}}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            version = json.load(response)["ray_version"]
        # A retry of "create" in this run must find the same head, not start a second one.
        ctx = get_current_context()
        ti = SimpleNamespace(dag_id=ctx["ti"].dag_id, run_id=ctx["run_id"], task_id="create", map_index=-1)
        again = CreateRayClusterOperator(task_id="create", local_options={{"num_cpus": 1}}).execute(
            {{"ti": ti, "run_id": ctx["run_id"]}}
        )
        Path(OUT).write_text(json.dumps({{"version": version, "again": again, "token": token}}))
        raise RuntimeError("upstream failure on purpose")

    delete = DeleteRayClusterOperator(task_id="delete", cluster=create.output)
    create >> work(create.output) >> delete.as_teardown(setups=create)
"""


def _processes_using(temp_dir: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if temp_dir in " ".join(proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found


@pytest.mark.integration
def test_local_cluster_teardown_runs_after_upstream_failure(airflow_db, local_registry, tmp_path):
    out = tmp_path / "work.json"
    dag = write_dag_file(
        "cluster_local_teardown", DAG_SOURCE.format(out=str(out), dag_id="cluster_local_teardown")
    )

    dag_run = dag.test()

    states = task_states(dag_run)
    assert states == {"create": "success", "work": "failed", "delete": "success"}
    assert str(dag_run.state) == "failed"
    handle = xcom_value(dag_run, "create")
    seen = json.loads(out.read_text())
    assert seen["version"].startswith("2.")  # the head answered with its token while the run was going
    assert seen["again"]["extra"]["pid"] == handle["extra"]["pid"]  # the retry reused the head
    assert handle["backend"] == "local" and seen["token"] not in json.dumps(handle)  # refers, never contains
    assert oct(os.stat(local_registry).st_mode & 0o777) == "0o700"
    # Teardown left nothing: no process of that head, no temp dir, no registry record.
    assert _processes_using(handle["extra"]["temp_dir"]) == []
    assert not Path(handle["extra"]["temp_dir"]).exists()
    assert list(local_registry.glob("*.json")) == []
    assert xcom_value(dag_run, "delete") == {"name": handle["name"], "backend": "local", "deleted": True}


@pytest.mark.integration
def test_local_janitor_stops_only_expired_heads(local_registry, tmp_path):
    """Records of heads whose processes are gone (as after a killed worker): expired ones are cleaned up."""
    from airflow_ray_provider.kuberay.labels import CREATED_BY, LABEL_CREATED_BY
    from airflow_ray_provider.operators.ray_cluster import RayClusterJanitorOperator

    local_registry.mkdir(mode=0o700)
    now = datetime.now(timezone.utc)
    for name, expiry in (("old", now - timedelta(minutes=1)), ("fresh", now + timedelta(hours=1))):
        temp_dir = tmp_path / f"rayh-{name}"
        temp_dir.mkdir()
        dead = 2**22 - 7  # no such process: the head died with its worker
        info = {
            "name": name,
            "pid": dead,
            "pgid": dead,
            "temp_dir": str(temp_dir),
            "token_file": None,
            "dashboard_url": "http://127.0.0.1:1",
            "gcs_address": "127.0.0.1:2",
        }
        record = {"info": info, "labels": {LABEL_CREATED_BY: CREATED_BY}, "expires_at": expiry.isoformat()}
        (local_registry / f"{name}.json").write_text(json.dumps(record))

    listed = RayClusterJanitorOperator(task_id="janitor", list_only=True).execute({})
    assert listed == ["old"] and (local_registry / "old.json").exists()

    deleted = RayClusterJanitorOperator(task_id="janitor").execute({})

    assert deleted == ["old"]
    assert sorted(p.name for p in local_registry.glob("*.json")) == ["fresh.json"]
    assert not (tmp_path / "rayh-old").exists() and (tmp_path / "rayh-fresh").exists()


@pytest.mark.integration
def test_a_head_is_up_only_once_its_node_started(ray_head):
    """The dashboard answers before the node registers; a head counts as started only after both."""
    from airflow_ray_provider.local.head import HEAD_LOG_NAME, STARTED_MARKER

    assert STARTED_MARKER in Path(ray_head.temp_dir, HEAD_LOG_NAME).read_text()


@pytest.mark.integration
def test_a_head_that_cannot_start_is_tried_again_and_leaves_nothing(tmp_path, caplog):
    from airflow_ray_provider.local.head import START_ATTEMPTS, LocalHeadConfig, LocalHeadError, start_head

    config = LocalHeadConfig(resources={"CPU": 1.0}, temp_root=str(tmp_path))  # `ray start` refuses CPU here

    with caplog.at_level("WARNING"), pytest.raises(LocalHeadError, match="exited with") as info:
        start_head(config, name="doomed")

    assert "num-cpus" in str(info.value)  # Ray's own reason, from the head's log
    retries = [r for r in caplog.records if r.message.startswith("`ray start --head` gave up")]
    assert len(retries) == START_ATTEMPTS - 1
    assert list(tmp_path.iterdir()) == []  # every attempt's temp dir is gone

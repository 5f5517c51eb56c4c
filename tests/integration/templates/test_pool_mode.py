"""The shipped nightly DAG in ``pool`` mode (``AIRFLOW_RAY_POOL``): real Airflow (``dag.test()``), real local
Ray heads. Both Ray jobs of the run (``prepare``, ``evaluate``) lease one pool cluster: one head starts, and
it stays warm (``idle_ttl``) after the run for the next one; the test stops it.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.dag_runs import load_dag, run_dag, task_states, xcom_value
from tests.fixtures.templates import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

#: A date no other module's run of the shipped DAGs uses (``dag.test()`` deletes an earlier run of it).
DS = "2026-11-27"


@pytest.fixture
def pool_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_registry: Path) -> Iterator[str]:
    """The shipped DAGs on a pool of the test's own (its registry too); its head is stopped at the end."""
    from airflow_ray_provider.clusters.local import list_clusters, stop_cluster
    from airflow_ray_provider.local import LocalHeadInfo

    for name in (
        "AIRFLOW_RAY_CONN_ID",
        "AIRFLOW_RAY_CLUSTER_CONN_ID",
        "AIRFLOW_RAY_SAMPLE_DATA",
        "AIRFLOW_RAY_MODE",
    ):
        monkeypatch.delenv(name, raising=False)
    pool = f"nightly-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("AIRFLOW_RAY_POOL", pool)
    monkeypatch.setenv("AIRFLOW_RAY_POOL_IDLE_TTL", "600")
    monkeypatch.setenv("AIRFLOW_RAY_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("AIRFLOW_RAY_EVAL_ROWS", "12000")
    monkeypatch.setenv("AIRFLOW_RAY_LOCAL_CPUS", "2")
    monkeypatch.setenv("AIRFLOW_RAY_POLL_INTERVAL", "0.3")
    try:
        yield pool
    finally:
        for record in list_clusters():
            stop_cluster(LocalHeadInfo.from_dict(record["info"]))


def test_nightly_dag_in_pool_mode_runs_both_jobs_on_one_warm_cluster(
    dags_folder: Path, pool_env: str
) -> None:
    from airflow_ray_provider.clusters import LocalBackend
    from airflow_ray_provider.clusters.local import list_clusters
    from airflow_ray_provider.launch.pool import PoolRecord
    from airflow_ray_provider.local import LocalHeadInfo, is_running

    path = Path(shutil.copy(REPO_ROOT / "dags" / "nightly_model_validation.py", dags_folder))
    dag = load_dag(path)
    assert not {"create_cluster", "delete_cluster"} & set(dag.task_ids)

    dag_run = run_dag(dag, DS)

    states = task_states(dag_run)
    assert dag_run.state == "success", states
    assert xcom_value(dag_run, "decide")["outcome"] == "promote"
    for task_id in ("prepare", "evaluate"):
        usage = xcom_value(dag_run, task_id, "usage")
        assert (usage["mode"], usage["cluster"], usage["basis"]) == ("pool", pool_env, "job requests"), usage
        assert usage["phases"]["queued_s"] is not None or "queued" in usage["not_available"], usage
    heads = list_clusters()
    assert [record["info"]["name"] for record in heads] == [pool_env]  # one head for both jobs
    assert is_running(LocalHeadInfo.from_dict(heads[0]["info"]))  # warm for the next run (idle_ttl)
    raw, leases = LocalBackend().lease_store().read(pool_env)
    assert raw is not None and PoolRecord(**raw).idle_since is not None and leases == {}

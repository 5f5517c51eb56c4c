"""One-task mode on the local backend end to end: ``dag.test()`` of ``EphemeralRayJobOperator`` with no
connection starts a real local Ray head in the task, runs the job (waiting in the worker, or deferred to
the triggerer) and stops the head in the same task, on success and on failure."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fixtures.dag_runs import run_dag, task_states, write_dag, xcom_value
from tests.fixtures.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ONE_TASK_DAG = """
import sys
from datetime import datetime

from airflow.sdk import DAG

from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator

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
    from airflow_ray_provider.clusters.local import list_clusters

    dag_run = run_dag(write_dag("one_task_local", ONE_TASK_DAG.format(dag_id="one_task_local")))

    assert task_states(dag_run) == {"waits": "success", "deferred": "success", "fails": "failed"}
    assert xcom_value(dag_run, "waits")["status"] == xcom_value(dag_run, "deferred")["status"] == "SUCCEEDED"
    assert list_clusters() == []  # every head stopped and unregistered, also the failed task's
    assert not any(local_registry.glob("*.json"))


POOL_DAG = """
import sys
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator, SubmitRayJobOperator

POOL = {{"name": "{pool}", "idle_ttl": 3, "lease_ttl": 4, "prices": {{"CPU": 0.1, "currency": "USD"}}}}

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    waits = EphemeralRayJobOperator(
        task_id="waits", local_options={{"num_cpus": 1}}, poll_interval=0.5, cluster_pool=POOL,
        entrypoint=[sys.executable, "-c", "print('on the pool')"],
    )
    deferred = EphemeralRayJobOperator(
        task_id="deferred", local_options={{"num_cpus": 1}}, poll_interval=0.5, deferrable=True,
        cluster_pool=POOL, entrypoint=[sys.executable, "-c", "import time; time.sleep(6); print('deferred')"],
    )

    @task.ray(local_options={{"num_cpus": 1}}, cluster_pool=POOL, poll_interval=0.5)
    def answer():
        return 42

    by_connection = SubmitRayJobOperator(
        task_id="by_connection", ray_conn_id="ray_pool", poll_interval=0.5, prices={{"CPU": 9.0}},
        entrypoint=[sys.executable, "-c", "print('by connection')"],
    )

    waits >> deferred >> answer() >> by_connection
"""

#: A ``ray`` connection that names the pool: ``SubmitRayJobOperator`` leases its cluster.
POOL_CONNECTION = {
    "conn_type": "ray",
    "extra": {"pool": {"name": "dagpool", "idle_ttl": 3, "lease_ttl": 4, "local_options": {"num_cpus": 1}}},
}


def test_tasks_on_a_pool_share_its_cluster_and_release_it_also_after_a_deferral(
    airflow_db, local_registry, monkeypatch
):
    """Four tasks of one spec (waiting in the worker, deferred, ``@task.ray``, ``SubmitRayJobOperator``
    through a connection that names the pool) lease one head; each releases its lease at its end (the
    deferred one in ``execute_complete``), and the head stays idle. The deferred job outlives its 4 s
    lease: the trigger renews it (no lease is ever seen expired). Every job is priced by the pool's prices,
    which its first task kept in the pool's record, over a task's own."""
    import json

    from airflow_ray_provider.clusters import LocalBackend
    from airflow_ray_provider.clusters.local import list_clusters, stop_cluster
    from airflow_ray_provider.launch.pool import PoolRecord, delete_idle_pools
    from airflow_ray_provider.local import LocalHeadInfo

    source = POOL_DAG.format(dag_id="one_task_pool", pool="dagpool")
    lapsed, seen, done = [], set(), threading.Event()

    def sample() -> None:
        while not done.wait(0.25):
            leases, now = LocalBackend().lease_store().read("dagpool")[1], time.time()
            seen.update(leases)
            lapsed.extend(holder for holder, expires in leases.items() if expires < now)

    monkeypatch.setenv("AIRFLOW_CONN_RAY_POOL", json.dumps(POOL_CONNECTION))
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        try:
            dag_run = run_dag(write_dag("one_task_pool", source))
        finally:
            done.set()
            sampler.join()
        assert len(seen) == 4 and lapsed == []

        tasks = ("waits", "deferred", "answer", "by_connection")
        assert task_states(dag_run) == dict.fromkeys(tasks, "success")
        assert xcom_value(dag_run, "answer") == 42
        assert xcom_value(dag_run, "deferred", key="usage")["mode"] == "pool"
        on_connection = xcom_value(dag_run, "by_connection", key="usage")
        assert on_connection["mode"] == "pool" and on_connection["cluster"] == "dagpool"
        assert on_connection["cost"]["prices"]["CPU"] == 0.1  # the pool's, not the task's 9.0
        assert [record["info"]["name"] for record in list_clusters()] == ["dagpool"]  # one head for all
        raw, leases = LocalBackend().lease_store().read("dagpool")
        assert raw is not None and PoolRecord(**raw).idle_since is not None and leases == {}
        backend = LocalBackend()
        jobs = backend.job_client(backend.attach("dagpool")).list_jobs()
        assert len(jobs) == 4 and {job.status.value for job in jobs} == {"SUCCEEDED"}
        eventually(
            lambda: delete_idle_pools(LocalBackend()) == ["dagpool"], timeout=10, what="idle pool gone"
        )
        assert list_clusters() == []
    finally:
        for record in list_clusters():
            stop_cluster(LocalHeadInfo.from_dict(record["info"]))

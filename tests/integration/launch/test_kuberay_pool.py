"""Pools on KubeRay through ``launch.run``: the emulator with its test KubeRay controller, Leases as the API
server treats them. Runs that start together create one RayCluster and all run on it; each releases its
lease; the janitor (``airflow-ray clusters janitor``) deletes the cluster once idle and no Lease of the pool
is left. A run of another spec fails before any job is submitted, naming the field.

Every cluster is annotated ``test.kuberay/head: shared``: the session's real Ray head answers behind it.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from tests.fixtures.kuberay import CONTROLLER_AGENT, HEAD_MODE, TEST_NAMESPACE
from tests.fixtures.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SHARED = {"annotations": {HEAD_MODE: "shared"}}
TEMPLATE = "http://{service_ip}:{dashboard_port}"
RAYCLUSTERS = f"/apis/ray.io/v1/namespaces/{TEST_NAMESPACE}/rayclusters"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{TEST_NAMESPACE}/leases"


@pytest.fixture
def pool(kube_context: str, kuberay_controller: Any, kuberay_client: Any) -> Iterator[str]:
    """A pool name of the test's own; its cluster, record and Leases are removed at the end."""
    from airflow_ray_provider.launch import kuberay_backend
    from airflow_ray_provider.launch.pool import delete_pool

    name = f"pool-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        backend = kuberay_backend(kube_context, TEST_NAMESPACE)
        try:
            if backend.lease_store().read(name)[0] is not None or kuberay_client.find(name):
                delete_pool(backend, backend.lease_store(), name, lambda message: None)
            for holder in backend.lease_store().read(name)[1]:
                backend.lease_store().release(name, holder)
        finally:
            backend.close()


def _run(context: str, pool: str, name: str, *, spec: dict[str, Any] = SHARED, said: list[str]) -> Any:
    from airflow_ray_provider.launch import KubeRayCluster, run

    return run(
        [sys.executable, "-c", "print('kuberay-pool-job')"],
        target=KubeRayCluster(context, TEST_NAMESPACE, spec, TEMPLATE),
        name=name, pool={"name": pool, "idle_ttl": 3, "lease_ttl": 4}, poll_interval=0.5,
        emit=lambda lines: None, say=said.append,
    )  # fmt: skip


def _pool_leases(kuberay_client: Any, pool: str) -> list[str]:
    from kubernetes.client import CoordinationV1Api

    from airflow_ray_provider.kuberay.leases import LABEL_POOL

    api: Any = CoordinationV1Api(kuberay_client.api_client)
    found = api.list_namespaced_lease(TEST_NAMESPACE, label_selector=f"{LABEL_POOL}={pool}").items
    return [lease.metadata.name for lease in found]


def _posts(kube: Any, since: int) -> list[str]:
    return [p for agent, method, p in kube.calls[since:] if method == "POST" and agent != CONTROLLER_AGENT]


def test_runs_started_together_create_one_raycluster_and_the_janitor_deletes_it_once_idle(
    pool: str, kube_context: str, kube_emulator: Any, kuberay_client: Any, ray_head: Any, ray_job_hook: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from airflow_ray_provider.cli import main
    from airflow_ray_provider.launch import kuberay_backend
    from airflow_ray_provider.launch.pool import PoolRecord, delete_idle_pools

    said: list[str] = []
    results: dict[str, Any] = {}
    runs = 5
    since = len(kube_emulator.calls)

    def one(name: str) -> None:
        try:
            results[name] = _run(kube_context, pool, name, said=said)
        except BaseException as exc:  # reported below
            results[name] = exc

    names = [f"{pool}-r{i}" for i in range(runs)]
    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)

    assert all(r.state.status is JobStatus.SUCCEEDED for r in results.values()) and len(results) == runs, (
        results
    )
    assert {r.dashboard_url for r in results.values()} == {ray_head.dashboard_url}
    assert _posts(kube_emulator, since).count(RAYCLUSTERS) == 1  # one RayCluster for every run
    assert [m for m in said if m.startswith("Started pool")] == [f"Started pool {pool}'s Ray cluster"]
    assert sum(m.startswith(f"Leased pool {pool}'s running") for m in said) == runs - 1, said
    sids = sorted(base_submission_id("cli", name, "run") for name in names)
    assert sorted(j.submission_id for j in ray_job_hook.list_jobs() if j.submission_id in sids) == sids

    backend = kuberay_backend(kube_context, TEST_NAMESPACE)
    try:
        raw, leases = backend.lease_store().read(pool)
        assert raw is not None and leases == {}  # every run released its lease
        record = PoolRecord(**raw)
        assert record.idle_since is not None and not record.deleting
        assert kuberay_client.find(pool) is not None  # it stays its idle TTL ...
        assert delete_idle_pools(backend) == []  # ... and the janitor leaves it until then
        time.sleep(max(0.0, record.idle_since + 3.2 - time.time()))
    finally:
        backend.close()

    capsys.readouterr()
    assert (
        main(["clusters", "janitor", "--kuberay-context", kube_context, "--namespace", TEST_NAMESPACE]) == 0
    )
    assert f"deleted {pool} (an idle pool)" in capsys.readouterr().out
    eventually(lambda: kuberay_client.find(pool) is None, timeout=60, what="the pool's RayCluster gone")
    backend = kuberay_backend(kube_context, TEST_NAMESPACE)
    try:
        assert backend.lease_store().read(pool) == (None, {}) and pool not in backend.lease_store().pools()
    finally:
        backend.close()
    assert _pool_leases(kuberay_client, pool) == []  # neither the lock nor any run's lease is left


def test_a_run_of_another_spec_fails_before_submitting_naming_the_field(
    pool: str, kube_context: str, kube_emulator: Any, kuberay_client: Any, ray_job_hook: Any
) -> None:
    said: list[str] = []
    assert _run(kube_context, pool, f"{pool}-first", said=said).state.status is JobStatus.SUCCEEDED
    since = len(kube_emulator.calls)

    other = {**SHARED, "env": {"POOL_FLAVOUR": "b"}}
    with pytest.raises(
        RayInvalidInputError, match=r"spec\.env\.POOL_FLAVOUR \(pool: unset, this run: \"b\"\)"
    ):
        _run(kube_context, pool, f"{pool}-other", spec=other, said=said)

    posts = _posts(kube_emulator, since)
    assert all(p.startswith(LEASES) for p in posts), posts  # the lock only: no RayCluster, no RayJob
    other_sid = base_submission_id("cli", f"{pool}-other", "run")
    assert not [j for j in ray_job_hook.list_jobs() if j.submission_id.startswith(other_sid)]
    assert kuberay_client.find(pool) is not None  # the pool's cluster is untouched


def test_submit_operator_on_a_pool_connection_leases_the_pools_raycluster(
    pool: str, kuberay_conn: str, kuberay_client: Any, kube_context: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SubmitRayJobOperator`` on a ``ray`` connection that names a KubeRay pool: it creates the pool's
    RayCluster, runs its job there, releases its Lease, and leaves the cluster for its idle TTL; its usage
    record is the pool's (``mode: pool``) at the pool's prices."""
    import json

    from airflow_ray_provider.launch import kuberay_backend
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
    from tests.fixtures.ray_job import StandInTI, context_for

    settings = {
        "name": pool,
        "idle_ttl": 30,
        "lease_ttl": 4,
        "cluster_conn_id": kuberay_conn,
        "cluster_spec": SHARED,
    }
    conn = {"conn_type": "ray", "extra": {"pool": settings, "prices": {"CPU": 0.2, "currency": "USD"}}}
    monkeypatch.setenv("AIRFLOW_CONN_RAY_KUBERAY_POOL", json.dumps(conn))
    operator = SubmitRayJobOperator(
        task_id="on_pool", ray_conn_id="ray_kuberay_pool", poll_interval=0.5,
        entrypoint=[sys.executable, "-c", "print('kuberay-pool-operator')"],
    )  # fmt: skip
    ti = StandInTI(dag_id="kuberay_pool_connection", task_id="on_pool")

    assert operator.execute(context_for(ti))["status"] == "SUCCEEDED"

    usage = ti.xcoms["usage"]
    assert usage["mode"] == "pool" and usage["cluster"] == pool and usage["cost"]["prices"]["CPU"] == 0.2
    assert kuberay_client.find(pool) is not None  # it stays its idle TTL
    backend = kuberay_backend(kube_context, TEST_NAMESPACE)
    try:
        raw, leases = backend.lease_store().read(pool)
        assert raw is not None and leases == {}  # the task released its Lease
    finally:
        backend.close()

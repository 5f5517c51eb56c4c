"""KubeRay fidelity against the emulator and the test KubeRay controller.

The token Secret KubeRay names for long cluster names, the controller's Warning events read by the create
path (sync and deferred), and KubeRay's own samples through the manifest path.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures.kuberay import (
    BEHAVIOUR,
    CONTROLLER_AGENT,
    HEAD_MODE,
    INVALID,
    REFUSED_SAMPLES,
    SAMPLE_FILES,
    SAMPLES_DIR,
)
from tests.fixtures.waiting import eventually

RUN_ID = "manual__2024-01-01T00:00:00+00:00"
NAMESPACE = "fidelity"  # watched by this module's controller, which never needs to start a Ray head


@pytest.fixture(scope="module")
def controller(kube_emulator: Any) -> Any:
    """A test KubeRay controller of its own namespace: the refusals below need no Ray head."""
    from tests.fixtures.kuberay_emulator import TestKubeRayController

    started = TestKubeRayController(kube_emulator)
    started.namespace = NAMESPACE
    started.start()
    try:
        yield started
    finally:
        started.stop()


def _context(task_id: str, dag_id: str = "fidelity_tests", run_id: str = RUN_ID) -> dict:
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "run_id": run_id}


def _provider_calls(kube: Any, since: int) -> list[tuple[str, str, str]]:
    return [call for call in kube.calls[since:] if call[0] != CONTROLLER_AGENT]


@pytest.mark.integration
def test_53_character_name_is_ready_through_the_truncated_token_secret(
    kuberay_controller, kuberay_conn, kuberay_client, ray_head_token
):
    """KubeRay names the token Secret after the last 50 characters; the provider reads exactly that one."""
    from airflow_ray_provider.hooks.kuberay import KubeRayHook
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

    name = "fidelity-" + "n" * 40 + "-end"
    assert len(name) == 53
    op = CreateRayClusterOperator(
        task_id="long", cluster_conn_id=kuberay_conn, cluster_name=name, poll_interval=0.2, ready_timeout=60,
        spec={"annotations": {HEAD_MODE: "shared"}},
    )  # fmt: skip
    handle = op.execute(_context("long"))
    try:
        assert handle["name"] == name and handle["auth_token_secret"] == name[3:]
        token = KubeRayHook(kuberay_conn_id=kuberay_conn).client.read_secret_value(name[3:], key="auth_token")
        assert token == ray_head_token
    finally:
        DeleteRayClusterOperator(task_id="delete", cluster=handle).execute(_context("delete"))
    assert kuberay_client.find(name) is None


@pytest.mark.integration
def test_controller_refuses_an_invalid_object_with_an_event_and_no_status(
    controller, kuberay_conn, kube_emulator
):
    """Sent past the pre-flight checks on purpose: the test controller behaves like KubeRay."""
    from airflow_ray_provider.clusters import ClusterPlan
    from airflow_ray_provider.hooks.kuberay import backend_for_connection

    name = "refused-" + "x" * 46
    assert len(name) == 54
    body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name}, "spec": {}}
    backend = backend_for_connection(kuberay_conn, namespace=NAMESPACE)
    client = backend.client  # type: ignore[attr-defined]
    client.create(body)
    try:
        events = eventually(lambda: client.list_events(name), what="the refusal event")
        assert [(e.type, e.reason) for e in events] == [("Warning", "InvalidRayClusterMetadata")]
        assert "no more than 53 characters" in events[0].message
        assert "status" not in client.get(name)  # KubeRay writes no status
        check = backend.check(ClusterPlan(name=name, namespace=NAMESPACE))
        assert check.verdict == "failed", check
        assert "KubeRay's controller refused" in check.message and "no more than 53" in check.message
    finally:
        client.delete(name)
        backend.close()
    events_path = f"/api/v1/namespaces/{NAMESPACE}/events"
    assert any(
        c[0] != CONTROLLER_AGENT and c[1] == "GET" and c[2] == events_path for c in kube_emulator.calls
    )


REFUSED = "workerGroupSpecs[0].numOfHosts must be 1 without TPUs"  # a rule the provider does not check


@pytest.mark.integration
def test_sync_create_fails_fast_with_the_controllers_message(controller, kuberay_conn):
    import time

    from airflow_ray_provider.exceptions import RayClusterNotReadyError
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    op = CreateRayClusterOperator(
        task_id="refused", cluster_conn_id=kuberay_conn, ready_timeout=300, poll_interval=0.3,
        namespace=NAMESPACE, spec={"annotations": {INVALID: REFUSED}},
    )  # fmt: skip
    start = time.monotonic()
    with pytest.raises(RayClusterNotReadyError) as excinfo:
        op.execute(_context("refused"))

    assert time.monotonic() - start < 60  # not the 300 s ready_timeout
    message = str(excinfo.value)
    assert "KubeRay's controller refused" in message and "InvalidRayClusterSpec: " in message
    assert REFUSED in message and "was deleted" in message
    assert (
        controller.custom.list_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters")["items"]
        == []
    )


REFUSED_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    CreateRayClusterOperator(
        task_id="create", cluster_conn_id="{conn_id}", deferrable=True, poll_interval=0.3, ready_timeout=900,
        namespace="{namespace}", spec={{"annotations": {{"{invalid}": "{refused}"}}}},
    )
"""


@pytest.mark.integration
def test_deferred_create_fails_fast_with_the_controllers_message(
    airflow_db, kube_emulator, controller, kuberay_conn, capfd
):
    import time

    from tests.fixtures.dag_runs import task_states
    from tests.fixtures.dag_runs import write_dag as write_dag_file

    dag_id = "fidelity_refused_deferred"
    source = REFUSED_DAG.format(
        dag_id=dag_id, conn_id=kuberay_conn, invalid=INVALID, refused=REFUSED, namespace=NAMESPACE
    )
    dag = write_dag_file(dag_id, source)
    since = len(kube_emulator.calls)
    start = time.monotonic()

    dag_run = dag.test()

    assert task_states(dag_run)["create"] == "failed"
    assert time.monotonic() - start < 400  # not the 900 s ready_timeout (dag.test alone takes ~1 min here)
    deleted = [p for _, m, p in _provider_calls(kube_emulator, since) if m == "DELETE"]
    assert len(deleted) == 1
    assert (
        controller.custom.list_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters")["items"]
        == []
    )
    output = "".join(capfd.readouterr())  # the task's log: the error it failed with
    assert REFUSED in output and "KubeRay's controller refused" in output


@pytest.mark.integration
def test_timeout_message_carries_recent_warning_events_and_conditions(controller, kuberay_conn):
    from airflow_ray_provider.exceptions import RayClusterNotReadyError
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    op = CreateRayClusterOperator(
        task_id="stuck", cluster_conn_id=kuberay_conn, ready_timeout=1.5, poll_interval=0.3,
        namespace=NAMESPACE, spec={"annotations": {BEHAVIOUR: "never-ready"}},
    )  # fmt: skip
    with pytest.raises(RayClusterNotReadyError) as excinfo:
        op.execute(_context("stuck"))

    message = str(excinfo.value)
    assert "was not ready after" in message and "ReplicaFailure=True" in message
    assert "recent Warning events: FailedCreateWorkerPod: " in message and "exceeded quota" in message
    assert (
        controller.custom.list_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters")["items"]
        == []
    )


@pytest.mark.integration
@pytest.mark.skipif(not SAMPLE_FILES, reason=f"KubeRay samples not found at {SAMPLES_DIR} (no ../shared)")
@pytest.mark.parametrize("sample", SAMPLE_FILES)
def test_every_kuberay_sample_through_the_manifest_path_against_the_emulator(
    kuberay_conn, kube_emulator, sample
):
    """Into a namespace no controller watches: stored as written, or refused before any API call."""
    import yaml

    from airflow_ray_provider.clusters import ClusterRequest, TaskIdentity
    from airflow_ray_provider.exceptions import RayInvalidInputError
    from airflow_ray_provider.hooks.kuberay import backend_for_connection

    path = SAMPLES_DIR / sample
    backend = backend_for_connection(kuberay_conn, namespace="samples")
    request = ClusterRequest(manifest=str(path), namespace="samples")
    identity = TaskIdentity("fidelity_samples", RUN_ID, sample.replace(".", "-"))
    since = len(kube_emulator.calls)
    try:
        if sample in REFUSED_SAMPLES:
            with pytest.raises(RayInvalidInputError, match=re.escape(REFUSED_SAMPLES[sample])):
                backend.plan(request, identity)
            assert _provider_calls(kube_emulator, since) == []
            return
        plan = backend.plan(request, identity)
        assert backend.ensure(plan) is True
        stored = backend.client.get(plan.name, namespace="samples")  # type: ignore[attr-defined]
        original = next(
            d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "RayCluster"
        )
        assert stored["spec"] == original["spec"]
        assert stored["metadata"]["name"] == plan.name and stored["metadata"]["namespace"] == "samples"
        assert backend.client.delete(plan.name, namespace="samples")  # type: ignore[attr-defined]
    finally:
        backend.close()

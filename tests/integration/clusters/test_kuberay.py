"""KubeRay backend against the Kubernetes emulator and the test KubeRay controller (real Ray heads).

Only Kubernetes is emulated (there is none here); the ``kubernetes`` client, Airflow (``dag.test()``) and
Ray (a real head behind each ready RayCluster, its Job API over HTTP with the Bearer token) are real.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.kuberay import KubeRayNotFoundError
from tests.fixtures.dag_runs import task_states, xcom_value
from tests.fixtures.dag_runs import write_dag as write_dag_file
from tests.fixtures.kuberay import BEHAVIOUR, CONTROLLER_AGENT, HEAD_MODE, TEST_NAMESPACE

RUN_ID = "manual__2024-01-01T00:00:00+00:00"


def _context(task_id: str, dag_id: str = "cluster_tests", run_id: str = RUN_ID, try_number: int = 1) -> dict:
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=-1, try_number=try_number)
    return {"ti": ti, "run_id": run_id}


def _provider_calls(kube: Any, since: int) -> list[tuple[str, str, str]]:
    return [call for call in kube.calls[since:] if call[0] != CONTROLLER_AGENT]


SUBMIT_DAG = """
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

OUT = {out!r}

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    create = CreateRayClusterOperator(
        task_id="create", cluster_conn_id="{conn_id}", deferrable=True, poll_interval=0.5, ready_timeout=180,
        spec={{"worker_groups": [{{"name": "cpu", "replicas": 1, "cpu": "1", "memory": "2Gi"}}]}},
    )

    @task
    def submit(handle):
        # Plain Job API over HTTP with the Bearer token read from the cluster's Secret via the hook.
        import json, time, urllib.error, urllib.request
        from pathlib import Path

        from airflow_ray_provider.hooks.kuberay import KubeRayHook

        token = KubeRayHook(kuberay_conn_id=handle["conn_id"]).client.read_secret_value(
            handle["auth_token_secret"], namespace=handle["namespace"],
            key=handle["auth_token_secret_key"],
        )
        headers = {{"Authorization": "Bearer " + token, "Content-Type": "application/json"}}

        def call(method, path, body=None):
            data = json.dumps(body).encode() if body is not None else None
            request = urllib.request.Request(handle["dashboard_url"] + path, data, headers, method=method)
            for attempt in range(8):  # the job agent may still be starting: 5xx is transient
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        raw = response.read()
                        return json.loads(raw) if raw.strip().startswith(b"{{") else raw.decode()
                except urllib.error.HTTPError as exc:
                    if exc.code < 500 or attempt == 7:
                        raise
                    time.sleep(1 + attempt)

        import sys  # the test head's PATH has no venv; a real KubeRay image would just say "python"
        program = "import ray; ray.init(); print('answer', ray.get(ray.remote(lambda: 6 * 7).remote()))"
        entrypoint = sys.executable + ' -c "' + program + '"'
        sid = call("POST", "/api/jobs/", {{"entrypoint": entrypoint}})["submission_id"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = call("GET", "/api/jobs/" + sid)["status"]
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(0.5)
        logs = call("GET", "/api/jobs/" + sid + "/logs")["logs"]
        Path(OUT).write_text(json.dumps({{"status": status, "logs": logs, "token": token}}))

    delete = DeleteRayClusterOperator(task_id="delete", cluster=create.output)
    create >> submit(create.output) >> delete.as_teardown(setups=create)
"""


@pytest.mark.integration
def test_create_ready_submit_delete_through_kubernetes_client(
    airflow_db, kuberay_controller, kuberay_conn, kuberay_client, tmp_path
):
    """create -> ready (deferred) -> submit a job on the real head -> delete, all under dag.test()."""
    from airflow_ray_provider.local import is_running

    out = tmp_path / "job.json"
    dag_id = "cluster_kuberay_submit"
    dag = write_dag_file(dag_id, SUBMIT_DAG.format(out=str(out), dag_id=dag_id, conn_id=kuberay_conn))

    dag_run = dag.test()

    assert task_states(dag_run) == {"create": "success", "submit": "success", "delete": "success"}
    handle = xcom_value(dag_run, "create")
    job = json.loads(out.read_text())
    assert job["status"] == "SUCCEEDED" and "answer 42" in job["logs"], job["logs"][-2000:]
    assert handle["backend"] == "kuberay" and handle["namespace"] == TEST_NAMESPACE
    assert handle["auth_token_secret"] == handle["name"] and handle["auth_token_secret_key"] == "auth_token"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", handle["dashboard_url"])
    assert job["token"] not in json.dumps(handle)  # the handle refers to the token, never contains it
    # Teardown: the RayCluster is gone from the API and the controller stopped its real head.
    assert kuberay_client.find(handle["name"]) is None
    head = kuberay_controller.history[handle["name"]]
    assert not is_running(head)
    assert kuberay_controller.head_of(TEST_NAMESPACE, handle["name"]) is None


@pytest.mark.integration
def test_retry_reuses_cluster_and_client_stays_within_role(
    kube_emulator, kuberay_controller, kuberay_conn, ray_head, ray_head_token
):
    from airflow_ray_provider.hooks.kuberay import KubeRayHook
    from airflow_ray_provider.kuberay.client import BASE_RULES
    from airflow_ray_provider.operators.ray_cluster import (
        CreateRayClusterOperator,
        DeleteRayClusterOperator,
        RayClusterJanitorOperator,
    )
    from tests.fixtures.kuberay import allowed

    since = len(kube_emulator.calls)
    kwargs = {"cluster_conn_id": kuberay_conn, "poll_interval": 0.2, "ready_timeout": 60}
    spec = {"annotations": {HEAD_MODE: "shared"}}

    first = CreateRayClusterOperator(task_id="create", spec=spec, **kwargs).execute(_context("create"))
    retried = CreateRayClusterOperator(task_id="create", spec=spec, **kwargs).execute(
        _context("create", try_number=2)
    )

    assert retried == first
    creates = [c for c in _provider_calls(kube_emulator, since) if c[1] == "POST"]
    assert [c[2] for c in creates] == [f"/apis/ray.io/v1/namespaces/{TEST_NAMESPACE}/rayclusters"]
    assert first["dashboard_url"] == ray_head.dashboard_url
    hook = KubeRayHook(kuberay_conn_id=first["conn_id"])
    token = hook.client.read_secret_value(
        first["auth_token_secret"],
        namespace=first["namespace"],
        key=first["auth_token_secret_key"],
    )
    assert token == ray_head_token
    ok, message = hook.test_connection()
    assert ok, message

    delete = DeleteRayClusterOperator(task_id="delete", cluster=first)
    assert delete.execute(_context("delete"))["deleted"] is True
    assert delete.execute(_context("delete"))["deleted"] is False  # already gone is success
    assert RayClusterJanitorOperator(task_id="janitor", cluster_conn_id=kuberay_conn).execute({}) == []

    calls = _provider_calls(kube_emulator, since)
    verbs = {"POST": "create", "DELETE": "delete"}  # the provider never patches (the janitor lists pools)
    for _, method, path in calls:
        match = re.fullmatch(
            rf"/(?:apis/(ray\.io|coordination\.k8s\.io)/v1|api/v1)/namespaces/{TEST_NAMESPACE}/(\w+)(/[^/]+)?",
            path,
        )
        assert match, f"call outside the namespace or to an unexpected path: {method} {path}"
        group, resource, named = match.group(1) or "", match.group(2), match.group(3)
        verb = verbs.get(method) or ("get" if named else "list")
        assert allowed(BASE_RULES, group=group, resource=resource, verb=verb), f"{method} {path} not in Role"
    assert {c[1] for c in calls} >= {"POST", "GET", "DELETE"}


@pytest.mark.integration
def test_timeout_deletes_cluster_and_secret_and_reports_conditions(
    kube_emulator, kuberay_controller, kuberay_conn, kuberay_client
):
    """A cluster whose pods never schedule: the task fails with the conditions and leaves nothing behind."""
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    since = len(kube_emulator.calls)
    spec = {
        "auth": "secret",  # KubeRay without authOptions: the provider creates (and must delete) the Secret
        "annotations": {BEHAVIOUR: "never-ready"},
        "worker_groups": [
            {"name": "gpu", "replicas": 1, "gpu": 1, "tolerations": [{"key": "nvidia.com/gpu"}]}
        ],
    }
    op = CreateRayClusterOperator(
        task_id="stuck", cluster_conn_id=kuberay_conn, spec=spec, ready_timeout=8, poll_interval=0.3
    )  # the controller writes the stuck status within ~0.5 s on a quiet machine, over 1.5 s at load 20

    with pytest.raises(RayClusterNotReadyError) as excinfo:
        op.execute(_context("stuck"))

    message = str(excinfo.value)
    assert "ReplicaFailure=True" in message and "Insufficient nvidia.com/gpu" in message
    assert "kubectl describe raycluster" in message and "was deleted" in message
    assert any(c["type"] == "ReplicaFailure" for c in excinfo.value.conditions)
    name = excinfo.value.name
    assert kuberay_client.find(name) is None
    with pytest.raises(KubeRayNotFoundError):
        kuberay_client.read_secret_value(f"{name}-ray-token", key="auth_token")
    methods = [(m, p) for _, m, p in _provider_calls(kube_emulator, since)]
    assert ("POST", f"/api/v1/namespaces/{TEST_NAMESPACE}/secrets") in methods
    assert ("DELETE", f"/api/v1/namespaces/{TEST_NAMESPACE}/secrets/{name}-ray-token") in methods


TIMEOUT_DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    create = CreateRayClusterOperator(
        task_id="create", cluster_conn_id="{conn_id}", deferrable=True, poll_interval=0.3, ready_timeout=2,
        spec={{"annotations": {{"{behaviour}": "never-ready"}}}},
    )
    DeleteRayClusterOperator(task_id="delete", cluster=create.output).as_teardown(setups=create)
"""


@pytest.mark.integration
def test_deferred_timeout_deletes_the_cluster(
    airflow_db, kube_emulator, kuberay_controller, kuberay_conn, kuberay_client
):
    dag_id = "cluster_kuberay_timeout"
    dag = write_dag_file(dag_id, TIMEOUT_DAG.format(dag_id=dag_id, conn_id=kuberay_conn, behaviour=BEHAVIOUR))
    since = len(kube_emulator.calls)

    dag_run = dag.test()

    assert task_states(dag_run)["create"] == "failed"
    created = [p for _, m, p in _provider_calls(kube_emulator, since) if m == "POST"]
    deleted = [p for _, m, p in _provider_calls(kube_emulator, since) if m == "DELETE"]
    assert len(created) == 1 and len(deleted) == 1
    name = deleted[0].rsplit("/", 1)[1]
    assert kuberay_client.find(name) is None


@pytest.mark.integration
def test_janitor_deletes_only_expired_provider_clusters(kuberay_conn, kube_emulator):
    """Clusters in a namespace no controller watches: only provider-owned, expired ones are deleted."""
    from airflow_ray_provider.kuberay import KubeRayClient, matches, ownership_labels
    from airflow_ray_provider.kuberay.client import ANNOTATION_EXPIRES_AT
    from airflow_ray_provider.operators.ray_cluster import RayClusterJanitorOperator

    namespace = "janitor-test"
    client = KubeRayClient(kube_emulator.api_client(), namespace=namespace)
    owned = ownership_labels(dag_id="d", run_id="r", task_id="t")
    past, future = "2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z"
    for name, labels, expiry in (
        ("expired-owned", owned, past),
        ("fresh-owned", owned, future),
        ("expired-foreign", {"team": "ml"}, past),
    ):
        meta = {"name": name, "labels": labels, "annotations": {ANNOTATION_EXPIRES_AT: expiry}}
        client.create({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": {}})

    from kubernetes.client import CustomObjectsApi  # the provider never patches (not in its Role)

    patched = CustomObjectsApi(client.api_client).patch_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", "fresh-owned", {"metadata": {"labels": {"team": "ml"}}}
    )
    assert patched["metadata"]["labels"]["team"] == "ml" and matches(patched, owned)
    kwargs = {"cluster_conn_id": kuberay_conn, "namespace": namespace}
    assert RayClusterJanitorOperator(task_id="j", list_only=True, **kwargs).execute({}) == ["expired-owned"]
    assert client.find("expired-owned") is not None
    assert RayClusterJanitorOperator(task_id="j", wait_for_deletion=True, **kwargs).execute({}) == [
        "expired-owned"
    ]

    remaining = sorted(o["metadata"]["name"] for o in client.list_labelled())
    assert remaining == ["expired-foreign", "fresh-owned"]
    for name in remaining:
        client.delete(name)
    client.api_client.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"spec": {"worker_groups": [{"name": "cpu", "replicas": -1}]}}, "non-negative integer"),
        ({"spec": {"worker_groups": [{"name": "CPU_group"}]}}, "DNS-1123"),
        ({"spec": {"head": {"cpus": "2"}}}, r"unknown field\(s\) \['cpus'\]"),
        (
            {"spec": {"worker_groups": [{"name": "w", "min_replicas": 3, "max_replicas": 1}]}},
            "must not exceed",
        ),
        ({"cluster_name": "Nightly_Eval"}, "'Nightly_Eval': RayCluster name should be a valid DNS1035"),
        (
            {
                "manifest": {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "spec": {"headGroupSpec": {}, "x": 1},
                }
            },
            r"unknown field\(s\) \['x'\]",
        ),
        ({"spec": {"head": {"memory": "lots"}}}, "not a Kubernetes quantity"),
    ],
)
def test_bad_input_is_rejected_before_any_api_call(kube_emulator, kuberay_conn, kwargs, expected):
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    since = len(kube_emulator.calls)
    with pytest.raises(RayInvalidInputError, match=expected):
        # A spec dict without Jinja is refused when the DAG is parsed (the operator is built); the
        # name and the manifest when the task runs: either way before any API call.
        op = CreateRayClusterOperator(task_id="bad", cluster_conn_id=kuberay_conn, **kwargs)
        op.execute(_context("bad"))

    assert _provider_calls(kube_emulator, since) == []


@pytest.mark.integration
def test_sample_manifest_is_sent_unchanged_but_for_ownership(
    kuberay_conn, kube_emulator, kuberay_sample_manifest
):
    """KubeRay's own sample through the manifest path, into a namespace no controller watches."""
    from airflow_ray_provider.clusters import ClusterRequest, KubeRayBackend, TaskIdentity
    from airflow_ray_provider.clusters.kuberay import KubeRayPlan
    from airflow_ray_provider.hooks.kuberay import backend_for_connection
    from airflow_ray_provider.kuberay import matches
    from airflow_ray_provider.kuberay.client import ANNOTATION_EXPIRES_AT
    from airflow_ray_provider.operators.ray_cluster import DeleteRayClusterOperator

    backend = backend_for_connection(kuberay_conn, namespace="manifests")
    identity = TaskIdentity("cluster_tests", RUN_ID, "create")
    plan = backend.plan(ClusterRequest(manifest=kuberay_sample_manifest, namespace="manifests"), identity)
    assert isinstance(plan, KubeRayPlan)
    assert backend.ensure(plan) is True

    assert isinstance(backend, KubeRayBackend)
    client = backend.client
    stored = client.get(plan.name, namespace="manifests")
    meta = stored.pop("metadata")
    expected = json.loads(json.dumps(kuberay_sample_manifest))
    expected_meta = expected.pop("metadata")
    assert stored == expected  # spec, apiVersion, kind: byte for byte
    assert meta["name"] == plan.name != expected_meta["name"]  # a per-run name: runs never collide
    assert matches({"metadata": meta}, identity.labels())
    assert ANNOTATION_EXPIRES_AT in meta["annotations"]
    assert plan.token_ref is None  # the sample has no auth: the handle will not claim any

    handle = backend.handle(plan, "http://raycluster-kuberay-head-svc.manifests.svc.cluster.local:8265")
    result = DeleteRayClusterOperator(task_id="delete", cluster=handle.to_dict()).execute(_context("delete"))
    assert result["deleted"] is True and client.find(plan.name, namespace="manifests") is None
    backend.close()

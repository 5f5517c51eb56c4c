"""Typed status, readiness verdicts, dashboard URLs, ownership labels, RBAC data, the trigger's shape."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_ray_provider.kuberay import (
    CREATED_BY,
    LABEL_CREATED_BY,
    LABEL_RUN_HASH,
    ClusterStatus,
    dashboard_url,
    is_expired,
    matches,
    ownership_annotations,
    ownership_labels,
    readiness,
    role_manifest,
)
from airflow_ray_provider.kuberay.client import BASE_RULES
from tests.fixtures.kuberay import allowed


def _obj(status: dict | None = None, **meta: object) -> dict:
    return {"metadata": {"name": "c1", "namespace": "ray", **meta}, "status": status or {}}


READY = {
    "state": "ready",
    "conditions": [
        {"type": "HeadPodReady", "status": "True"},
        {"type": "RayClusterProvisioned", "status": "True"},
    ],
    "head": {"serviceName": "c1-head-svc", "serviceIP": "10.0.0.7", "podIP": "10.1.2.3"},
    "endpoints": {"dashboard": "8265", "client": "10001"},
}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("obj", "verdict"),
    [
        (_obj(READY), "ready"),
        (_obj({"state": "ready"}), "ready"),  # KubeRay versions that write no conditions
        (_obj({"conditions": [{"type": "HeadPodReady", "status": "False"}], "state": "ready"}), "waiting"),
        (_obj({}), "waiting"),
        (_obj({"conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]}), "waiting"),
        (_obj({"state": "failed", "reason": "bad image"}), "failed"),
        (_obj(READY, deletionTimestamp="2024-01-01T00:00:00Z"), "failed"),
    ],
)
def test_readiness_verdicts(obj, verdict):
    assert readiness(ClusterStatus.from_object(obj))[0] == verdict


@pytest.mark.unit
def test_summary_names_every_condition():
    status = ClusterStatus.from_object(
        _obj(
            {
                "conditions": [
                    {"type": "ReplicaFailure", "status": "True", "reason": "Quota", "message": "no gpu"}
                ]
            }
        )
    )
    assert status.summary() == "state=<none>; ReplicaFailure=True (Quota: no gpu)"
    assert readiness(status)[0] == "waiting"  # KubeRay retries pod creation


@pytest.mark.unit
def test_dashboard_url_default_template_and_errors():
    status = ClusterStatus.from_object(_obj(READY))
    assert dashboard_url(status) == "http://c1-head-svc.ray.svc.cluster.local:8265"
    assert dashboard_url(status, "http://{service_ip}:{dashboard_port}/") == "http://10.0.0.7:8265"
    assert (
        dashboard_url(status, "https://{name}.{namespace}.ray.example.com")
        == "https://c1.ray.ray.example.com"
    )
    with pytest.raises(ValueError, match="unknown field 'port'"):
        dashboard_url(status, "http://{service_ip}:{port}")


@pytest.mark.unit
def test_ownership_labels_are_valid_and_expiry_is_read_back():
    labels = ownership_labels(dag_id="a" * 80 + ".b", run_id="manual__2024-01-01T00:00:00+00:00", task_id="t")
    assert all(len(v) <= 63 for v in labels.values())
    assert labels[LABEL_CREATED_BY] == CREATED_BY and len(labels[LABEL_RUN_HASH]) == 10
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    notes = ownership_annotations(run_id="r", expires_at=now + timedelta(hours=1))
    obj = {"metadata": {"annotations": notes}}
    assert not is_expired(obj, now) and is_expired(obj, now + timedelta(hours=2))
    assert not is_expired({"metadata": {}}, now)  # no expiry: never a janitor's business
    assert matches({"metadata": {"labels": {**labels, "x": "y"}}}, labels)
    assert not matches({"metadata": {"labels": {}}}, labels)


@pytest.mark.unit
def test_role_is_namespaced_and_minimal():
    role = role_manifest("ray-jobs")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "ray-jobs"
    assert allowed(BASE_RULES, group="ray.io", resource="rayclusters", verb="delete")
    assert allowed(BASE_RULES, group="", resource="secrets", verb="get")
    assert not allowed(BASE_RULES, group="", resource="secrets", verb="create")
    assert allowed(BASE_RULES, group="", resource="events", verb="list")  # KubeRay's refusals
    assert allowed(BASE_RULES, group="", resource="events", verb="get")
    assert not allowed(BASE_RULES, group="ray.io", resource="rayclusters", verb="patch")  # nothing patches
    assert not allowed(
        BASE_RULES, group="apiextensions.k8s.io", resource="customresourcedefinitions", verb="create"
    )
    secret_mode = role_manifest("ns", secret_mode=True)["rules"]
    assert allowed(secret_mode, group="", resource="secrets", verb="create")
    assert secret_mode[-1]["verbs"] == ["create", "delete"]


@pytest.mark.unit
def test_trigger_serializes_every_argument():
    from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger

    trigger = RayClusterReadyTrigger(
        conn_id="k", plan={"name": "c1", "namespace": "ray", "dashboard_url_template": "http://{service_ip}:{dashboard_port}",
        "token_ref": ["c1", "auth_token"]}, timeout=30, poll_interval=1, start_time=123.0,
    )  # fmt: skip
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_ray_provider.triggers.ray_cluster.RayClusterReadyTrigger"
    rebuilt = RayClusterReadyTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs) and kwargs["start_time"] == 123.0

"""RayClusterReadyTrigger in an asyncio loop against the Kubernetes emulator (official client).

The RayClusters live in a namespace no test controller watches, so their status is whatever the test
writes: nothing starts, and the trigger's timeout and failure paths are reached for real.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_ray_provider.clusters import validate_event
from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger

pytestmark = pytest.mark.integration
NAMESPACE = "trigger-test"


async def _events(trigger: RayClusterReadyTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


@pytest.fixture()
def unwatched_client(kube_emulator):
    from airflow_ray_provider.kuberay import KubeRayClient

    client = KubeRayClient(kube_emulator.api_client(), namespace=NAMESPACE)
    try:
        yield client
    finally:
        for obj in client.list_labelled():
            client.delete(obj["metadata"]["name"])
        client.api_client.close()


def _cluster(client: Any, name: str, status: dict[str, Any]) -> None:
    body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name}, "spec": {}}
    client.create(body)
    from kubernetes.client import CustomObjectsApi  # the provider never patches: the test writes the status

    CustomObjectsApi(client.api_client).patch_namespaced_custom_object(
        "ray.io", "v1", client.namespace, "rayclusters", name, {"status": status}
    )


def test_timeout_event_carries_the_conditions_and_what_to_run(kuberay_conn, unwatched_client):
    conditions = [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "no nvidia.com/gpu"}
    ]
    _cluster(unwatched_client, "stuck", {"conditions": conditions})
    trigger = RayClusterReadyTrigger(
        conn_id=kuberay_conn, plan={"name": "stuck", "namespace": NAMESPACE}, timeout=0.6, poll_interval=0.2
    )

    started = time.monotonic()
    (event,) = asyncio.run(_events(trigger))

    event = validate_event(event)
    assert event["status"] == "timeout" and event["conditions"] == conditions
    assert "RayCluster trigger-test/stuck was not ready after 1s" in event["message"]
    assert "ReplicaFailure=True (FailedCreate: no nvidia.com/gpu)" in event["message"]
    assert "kubectl describe raycluster stuck -n trigger-test" in event["message"]
    assert 0.6 <= time.monotonic() - started < 30


def test_failed_and_missing_clusters_end_the_wait_at_once(kuberay_conn, unwatched_client):
    _cluster(unwatched_client, "broken", {"state": "failed", "reason": "bad pod template"})
    expectations = (("broken", "RayCluster broken failed: state=failed"), ("absent", "does not exist"))
    for name, expected in expectations:
        trigger = RayClusterReadyTrigger(
            conn_id=kuberay_conn, plan={"name": name, "namespace": NAMESPACE}, timeout=300
        )

        (event,) = asyncio.run(_events(trigger))

        assert validate_event(event)["status"] == "failed" and expected in event["message"], event

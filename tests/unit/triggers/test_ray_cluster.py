"""Cluster readiness: the event helpers shared by the sync wait, the trigger and ``execute_complete``.

Also the trigger's serialisation, its plan round trip and, through the local backend (a head that is
not running, so nothing starts), its run loop ending in one event.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any

import pytest

from airflow_ray_provider.clusters import (
    ClusterPlan,
    RayClusterHandle,
    ReadinessCheck,
    TokenRef,
    event_for,
    make_event,
    validate_event,
)
from airflow_ray_provider.clusters.backend import EVENT_STATUSES
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayProviderError
from airflow_ray_provider.launch import wait_until_ready
from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger

pytestmark = pytest.mark.unit

WAITING = ReadinessCheck(
    "waiting",
    "ReplicaFailure=True",
    "RayCluster ray/c1",
    state="state=<none>; ReplicaFailure=True (Quota: no gpu)",
    conditions=[{"type": "ReplicaFailure", "status": "True"}],
    inspect="kubectl describe raycluster c1 -n ray",
)


def test_event_for_is_the_one_rule():
    ready = ReadinessCheck("ready", "answers", "RayCluster ray/c1", "http://h:8265")
    assert event_for(ready, waited=1e9, timeout=1) == {
        "status": "ready",
        "message": "answers",
        "dashboard_url": "http://h:8265",
        "conditions": [],
    }  # ready wins even past the timeout: the cluster is there
    failed = ReadinessCheck("failed", "state=failed", "RayCluster ray/c1", conditions=[{"type": "X"}])
    assert event_for(failed, waited=0, timeout=60) == make_event(
        "failed", message="state=failed", conditions=[{"type": "X"}]
    )
    assert event_for(WAITING, waited=59.9, timeout=60) is None
    timeout = event_for(WAITING, waited=60, timeout=60)
    assert timeout is not None and timeout["status"] == "timeout"
    assert timeout["conditions"] == WAITING.conditions and timeout["dashboard_url"] is None


def _timeout_message(check: ReadinessCheck, timeout: float) -> str:
    event = event_for(check, waited=timeout, timeout=timeout)
    assert event is not None
    return event["message"]


def test_timeout_message_names_the_state_the_conditions_and_what_to_run():
    message = _timeout_message(WAITING, 900)
    assert message.startswith("RayCluster ray/c1 was not ready after 900s: ReplicaFailure=True.")
    assert "Last status: state=<none>; ReplicaFailure=True (Quota: no gpu)." in message
    assert message.endswith("Inspect it with: kubectl describe raycluster c1 -n ray")
    bare = _timeout_message(ReadinessCheck("waiting", "no answer", "local Ray head h"), 5)
    assert bare == "local Ray head h was not ready after 5s: no answer. Last status: no status."


def test_events_are_validated_and_completed():
    event = make_event("timeout", message="m", conditions=[{"type": "X"}])
    assert validate_event(json.loads(json.dumps(event))) == event  # survives the triggerer's JSON
    # A minimal event (no dashboard_url / conditions keys) reads.
    assert validate_event({"status": "failed", "message": "m"}) == make_event("failed", message="m")
    assert set(EVENT_STATUSES) == {"ready", "failed", "timeout", "error"}
    for bad in (
        None,
        [],
        {},
        {"status": "weird"},
        {"status": "ready", "message": "no url"},
        {"status": "failed", "conditions": "ReplicaFailure"},
    ):
        with pytest.raises(RayProviderError):
            validate_event(bad)
    with pytest.raises(ValueError, match="dashboard URL"):
        make_event("ready")


class _Looks:
    """A backend's ``check`` and ``handle``, scripted (the wait is the subject here)."""

    def __init__(self, *looks: ReadinessCheck) -> None:
        self.looks, self.seen = list(looks), []

    def check(self, plan: ClusterPlan) -> ReadinessCheck:
        self.seen.append(time.monotonic())
        return self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]

    def handle(self, plan: ClusterPlan, dashboard_url: str) -> RayClusterHandle:
        return RayClusterHandle(backend="kuberay", name=plan.name, dashboard_url=dashboard_url)


def test_wait_until_ready_polls_until_an_event():
    backend = _Looks(WAITING, WAITING, ReadinessCheck("ready", "answers", "RayCluster ray/c1", "http://h:1"))

    handle = wait_until_ready(backend, ClusterPlan("c1"), timeout=60, poll_interval=0.05)  # type: ignore[arg-type]

    assert handle.dashboard_url == "http://h:1" and handle.name == "c1"
    assert len(backend.seen) == 3 and backend.seen[2] - backend.seen[0] >= 0.1  # slept between looks
    started = time.monotonic()
    with pytest.raises(RayClusterNotReadyError, match="was not ready after 0s") as excinfo:
        wait_until_ready(_Looks(WAITING), ClusterPlan("c1"), timeout=0.2, poll_interval=0.05)  # type: ignore[arg-type]
    assert excinfo.value.conditions == WAITING.conditions
    assert 0.2 <= time.monotonic() - started < 5


def test_trigger_serializes_every_argument_and_rebuilds_the_plan():
    plan = ClusterPlan(
        name="c1",
        namespace="ray",
        dashboard_url_template="http://{service_ip}:{dashboard_port}",
        token_ref=TokenRef("c1-ray-token", "tok", provider_created=True),
    )
    trigger = RayClusterReadyTrigger.for_plan("k", plan, timeout=30, poll_interval=1)
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # JSON-safe, as the triggerer stores it
    assert classpath == "airflow_ray_provider.triggers.ray_cluster.RayClusterReadyTrigger"
    assert set(kwargs) == set(inspect.signature(RayClusterReadyTrigger.__init__).parameters) - {"self"}
    rebuilt = RayClusterReadyTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    # What a look needs comes back; whether the provider created the Secret does not matter to it.
    assert rebuilt.cluster_plan() == ClusterPlan(
        name="c1",
        namespace="ray",
        dashboard_url_template=plan.dashboard_url_template,
        token_ref=TokenRef("c1-ray-token", "tok"),
    )
    no_auth = RayClusterReadyTrigger.for_plan(None, ClusterPlan("c2"), timeout=1, poll_interval=1)
    assert no_auth.cluster_plan() == ClusterPlan("c2") and no_auth.serialize()[1]["plan"]["token_ref"] is None


async def _events(trigger: RayClusterReadyTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


def test_trigger_ends_with_one_validated_event(local_registry):
    """Through the local backend: a head that is not running is a ``failed`` event, at once."""
    trigger = RayClusterReadyTrigger(conn_id=None, plan={"name": "no-such-head"}, timeout=30)

    events = asyncio.run(_events(trigger))

    assert len(events) == 1
    event = validate_event(events[0])
    assert event["status"] == "failed" and "local Ray head no-such-head is not running" in event["message"]


def test_trigger_turns_errors_into_an_error_event(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NOT_KUBERAY", json.dumps({"conn_type": "http", "host": "x"}))
    trigger = RayClusterReadyTrigger(conn_id="not_kuberay", plan={"name": "c1", "namespace": "ray"})

    (event,) = asyncio.run(_events(trigger))

    assert validate_event(event)["status"] == "error"
    assert "RayInvalidInputError" in event["message"] and "type 'http'" in event["message"]

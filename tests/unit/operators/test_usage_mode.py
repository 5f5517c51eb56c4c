"""The usage record's mode, cluster, ``own_cluster`` and teardown note: what the run's cluster is to the run
(:meth:`ClusterTarget.usage_facts`), in the operator's words. No cluster and no connection is reached."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from airflow_ray_provider.clusters import ClusterPlan, RayClusterHandle
from airflow_ray_provider.jobs.client import JobClient
from airflow_ray_provider.launch import ClusterTarget, RayJobTarget
from airflow_ray_provider.launch.rayjob import RayJobPlan
from airflow_ray_provider.launch.targets import TEARDOWN_NOTES
from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator, SubmitRayJobOperator

pytestmark = pytest.mark.unit


def _handle(*, owned: bool) -> RayClusterHandle:
    return RayClusterHandle(backend="local", name="c1", dashboard_url="http://127.0.0.1:1", owned=owned)


def _targets() -> dict[str, ClusterTarget]:
    # a lease, as far as the record is concerned (no store reached)
    pool = SimpleNamespace(prices=None, ref=lambda: {"pool": {"name": "p1"}, "holder": "h"})
    return {
        "connection": ClusterTarget(
            client=JobClient("http://127.0.0.1:1"), face_ref={"ray_conn_id": "ray_x"}
        ),
        "attached": ClusterTarget(handle=_handle(owned=False)),
        "dag_task": ClusterTarget(handle=_handle(owned=True)),
        "own": ClusterTarget(plan=ClusterPlan(name="own-1")),
        "own_deferred": ClusterTarget(handle=_handle(owned=True), owned=True),
        "pool": ClusterTarget(plan=ClusterPlan(name="p1"), pool=pool, face_ref={"ray_conn_id": "ray_pool"}),
    }


@pytest.mark.parametrize(
    ("which", "facts"),
    [
        ("connection", ("standing", "ray_x", "ray_x")),
        ("attached", ("standing", "c1", None)),
        ("dag_task", ("ephemeral", "c1", None)),
        ("own", ("one_task", "own-1", None)),
        ("own_deferred", ("one_task", "c1", None)),
        ("pool", ("pool", "p1", "ray_pool")),
    ],
)
def test_the_target_says_what_its_cluster_is(which: str, facts: tuple[str, str, str | None]) -> None:
    kind, name, conn_id = facts
    own = kind in ("one_task", "ephemeral")
    assert _targets()[which].usage_facts() == (kind, name, own, TEARDOWN_NOTES[kind], conn_id)


@pytest.mark.parametrize(
    ("operator", "which", "mode", "own"),
    [
        (SubmitRayJobOperator, "attached", "standing", False),
        (SubmitRayJobOperator, "dag_task", "ephemeral", True),
        (SubmitRayJobOperator, "pool", "pool", False),
        (EphemeralRayJobOperator, "own", "one_task", True),
        (EphemeralRayJobOperator, "pool", "pool", False),
    ],
)
def test_the_record_takes_the_kind_as_its_mode(operator: type, which: str, mode: str, own: bool) -> None:
    options = operator(task_id="t", entrypoint="python x.py").usage(_targets()[which])
    kind = _targets()[which].usage_facts()[0]
    assert (options.mode, options.own_cluster, options.teardown_note) == (mode, own, TEARDOWN_NOTES[kind])


def test_a_named_mode_holds_except_on_a_pool() -> None:
    class Named(SubmitRayJobOperator):
        usage_mode = "task_ray"

    op = Named(task_id="t", entrypoint="python x.py")
    assert op.usage(_targets()["dag_task"]).mode == "task_ray"
    assert op.usage(_targets()["pool"]).mode == "pool"


def test_a_rayjob_record_names_its_rayjob_and_its_connection() -> None:
    plan = RayJobPlan(name="rj", namespace="ml", standing_cluster="c9", teardown_note="kept by KubeRay")
    target = RayJobTarget(cast("Any", None), plan, ref={"cluster_conn_id": "kuberay_x"})
    assert target.usage_facts() == ("rayjob", "rj", False, "kept by KubeRay", "kuberay_x")
    own = RayJobTarget(cast("Any", None), RayJobPlan(name="rj", namespace="ml"))
    assert own.usage_facts()[2] is True

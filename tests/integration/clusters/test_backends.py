"""The ``ClusterBackend`` contract: the local and KubeRay backends pass the same tests.

Each case goes through the one factory (:func:`backend_for_connection`), as the operators do. The local
backend starts real Ray heads; the KubeRay backend talks to the Kubernetes emulator through the official
client, and the test controller puts the session's real head behind each RayCluster (``shared`` mode),
so both answer the Job API with their token.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from airflow_ray_provider.clusters import (
    ClusterBackend,
    ClusterRequest,
    LocalClusterOptions,
    RayClusterHandle,
    RayClusterSpec,
    TaskIdentity,
    make_event,
)
from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import backend_for_connection
from airflow_ray_provider.kuberay.spec import WorkerGroup
from airflow_ray_provider.launch.targets import ready_handle, wait_until_ready
from tests.fixtures.kuberay import CONTROLLER_AGENT, HEAD_MODE

pytestmark = pytest.mark.integration


@dataclass
class Case:
    """One backend under test, the request it is given and who asks."""

    backend: ClusterBackend
    request: ClusterRequest
    identity: TaskIdentity


@pytest.fixture(params=["local", "kuberay"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    """A backend from the factory; whatever a test leaves of its run is deleted afterwards."""
    if request.param == "local":
        request.getfixturevalue("local_registry")
        backend = backend_for_connection(None)
        cluster_request = ClusterRequest(local_options=LocalClusterOptions(num_cpus=1))
    else:
        request.getfixturevalue("kuberay_controller")
        backend = backend_for_connection(request.getfixturevalue("kuberay_conn"))
        cluster_request = ClusterRequest(spec=RayClusterSpec(annotations={HEAD_MODE: "shared"}))
    identity = TaskIdentity("backend_contract", f"manual__{uuid.uuid4().hex[:12]}", "create")
    try:
        yield Case(backend, cluster_request, identity)
    finally:
        backend.delete_labelled(identity.run_labels(), wait=True, timeout=60)
        backend.close()


def _names(handles: list[RayClusterHandle]) -> set[str]:
    return {handle.name for handle in handles}


def test_ensure_reuse_wait_handle_expire_delete(case: Case):
    from airflow_ray_provider.hooks.ray_job import target_from_ref

    backend = case.backend
    assert isinstance(backend, ClusterBackend) and backend.can_defer == (backend.kind == "kuberay")
    plan = backend.plan(case.request, case.identity)

    assert backend.ensure(plan) is True
    assert backend.ensure(backend.plan(case.request, case.identity)) is False  # a retry reuses it
    handle = wait_until_ready(backend, plan, timeout=60, poll_interval=0.2)
    check = backend.check(plan)
    assert check.verdict == "ready" and check.dashboard_url, check

    assert (handle.backend, handle.name) == (backend.kind, plan.name)
    assert handle.dashboard_url == check.dashboard_url
    assert handle.auth_token_file or handle.auth_token_secret  # the cluster expects a token
    assert RayClusterHandle.from_dict(handle.to_dict()) == handle
    version = target_from_ref({"handle": handle.to_dict(), "retry_attempts": 3}).dashboard().version()
    assert version.startswith("2.")  # the handle's token opens the Job API
    attached = backend.attach(plan.name)  # the same cluster as a standing one: one look, never owned
    assert attached.owned is False and attached.dashboard_url == handle.dashboard_url
    assert (attached.auth_token_file, attached.auth_token_secret) == (
        handle.auth_token_file, handle.auth_token_secret
    )  # fmt: skip
    assert backend.delete(attached, wait=True, timeout=60) is False  # not ours to delete
    assert backend.check(plan).verdict == "ready"
    with pytest.raises(RayInvalidInputError, match="no-such-cluster"):
        backend.attach("no-such-cluster")

    later = datetime.now(timezone.utc) + timedelta(days=2)
    assert plan.name not in _names([found.handle for found in backend.listed() if found.expired])
    assert plan.name in _names([found.handle for found in backend.listed(now=later) if found.expired])
    assert backend.delete(handle, wait=True, timeout=60) is True
    assert backend.check(plan).verdict == "failed"  # gone for good: waiting longer will not help
    assert backend.delete(handle, wait=True, timeout=60) is False  # already gone is no error


def test_delete_labelled_removes_only_this_runs_clusters(case: Case):
    backend, identity = case.backend, case.identity
    plan = backend.plan(case.request, identity)
    backend.ensure(plan)
    assert wait_until_ready(backend, plan, timeout=60, poll_interval=0.2).name == plan.name
    other_run = TaskIdentity(identity.dag_id, "manual__another-run", identity.task_id)

    assert backend.delete_labelled(other_run.run_labels(), wait=True, timeout=60) == []
    assert backend.check(plan).verdict == "ready"
    assert backend.delete_labelled(identity.run_labels(), wait=True, timeout=60) == [plan.name]
    assert backend.check(plan).verdict == "failed"


def test_a_wait_that_did_not_end_ready_raises_with_the_event_and_delete_by_plan_removes_it(case: Case):
    backend = case.backend
    plan = backend.plan(case.request, case.identity)
    backend.ensure(plan)
    conditions = [{"type": "ReplicaFailure", "status": "True", "reason": "Quota"}]
    event = make_event("timeout", message="was not ready after 1s.", conditions=conditions)

    with pytest.raises(RayClusterNotReadyError) as info:
        ready_handle(backend, plan, event)

    assert str(info.value).startswith("was not ready after 1s.")
    assert info.value.name == plan.name and info.value.conditions == conditions
    assert backend.check(plan).verdict != "failed"  # the error deletes nothing: the run's cleanup does
    assert backend.delete(plan, wait=True, timeout=60) is True  # by its plan: it never gave a handle
    assert backend.check(plan).verdict == "failed"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"cluster_name": "Nightly_Eval"}, "'Nightly_Eval': RayCluster name should be a valid DNS1035"),
        ({"spec": RayClusterSpec(worker_groups=[WorkerGroup("w", replicas=-1)])}, "non-negative integer"),
    ],
)
def test_plan_rejects_bad_input_before_anything_is_created(case: Case, request, fields, expected):
    kube = request.getfixturevalue("kube_emulator") if case.backend.kind == "kuberay" else None
    since = len(kube.calls) if kube else 0

    with pytest.raises(RayInvalidInputError, match=expected):
        case.backend.plan(ClusterRequest(**fields), case.identity)

    if kube is not None:
        assert [c for c in kube.calls[since:] if c[0] != CONTROLLER_AGENT] == []
    else:
        assert list(request.getfixturevalue("local_registry").glob("*.json")) == []

"""RayJob planning (every check before any API call), the RayJob status verdict, and handle ownership."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from airflow_ray_provider.clusters import (
    KubeRayBackend,
    KubeRaySettings,
    LocalBackend,
    RayClusterHandle,
    RayClusterSpec,
    RayJobOptions,
    TaskIdentity,
)
from airflow_ray_provider.exceptions import KubeRayJobError, RayInvalidInputError
from airflow_ray_provider.kuberay import ANNOTATION_RUN_ID, RayJobStatus, matches
from airflow_ray_provider.kuberay.client import ANNOTATION_EXPIRES_AT
from airflow_ray_provider.launch import RayJobTarget, plan_rayjob
from airflow_ray_provider.launch.rayjob import RayJobLook, RayJobPlan

pytestmark = pytest.mark.unit

IDENTITY = TaskIdentity("nightly", "manual__2026-01-01T00:00:00+00:00", "evaluate", 3)
OPTIONS = RayJobOptions(entrypoint="python job.py", job_id="airflow-nightly-evaluate-m3-x")


def _no_api() -> Any:
    raise AssertionError("planning made an API call")


def _jobs(**settings: Any) -> KubeRayBackend:
    defaults = {"conn_id": "kuberay_prod", "namespace": "ml", "ray_auth": "auth_options"}
    return KubeRayBackend(KubeRaySettings(**{**defaults, **settings}), _no_api)


def test_plan_is_deterministic_per_task_instance_and_makes_no_api_call() -> None:
    jobs = _jobs(default_image="repo/ray:2.60.0")
    spec = RayClusterSpec(labels={"team": "ml"})

    plan = plan_rayjob(jobs, OPTIONS, IDENTITY, spec=spec)
    again = plan_rayjob(jobs, OPTIONS, dataclasses.replace(IDENTITY), spec=spec)
    other = plan_rayjob(jobs, OPTIONS, dataclasses.replace(IDENTITY, map_index=4), spec=spec)

    assert plan == again and plan.name != other.name  # the map index is part of the name
    assert plan.name.startswith("rayjob-nightly-") and len(plan.name) <= 47
    assert (plan.namespace, plan.standing_cluster, plan.token_secret) == ("ml", None, None)
    assert plan.labels == IDENTITY.labels() and matches(plan.body, IDENTITY.labels())
    assert plan.body["metadata"]["labels"]["team"] == "ml"  # KubeRay copies it onto the cluster
    meta = plan.body["metadata"]
    assert ANNOTATION_EXPIRES_AT not in meta["annotations"]  # Kubernetes cleans up: no janitor expiry
    assert meta["annotations"][ANNOTATION_RUN_ID] == IDENTITY.run_id
    containers = plan.body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert containers[0]["image"] == "repo/ray:2.60.0"


def test_plan_in_secret_auth_mode_names_the_secret_the_provider_creates() -> None:
    plan = plan_rayjob(_jobs(ray_auth="secret"), OPTIONS, IDENTITY)

    assert plan.token_secret == f"{plan.name}-ray-token"
    assert "authOptions" not in plan.body["spec"]["rayClusterSpec"]


def test_plan_from_a_raycluster_manifest_and_for_a_standing_cluster() -> None:
    manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"labels": {"team": "ml"}},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}
                },
            }
        },
    }
    from_manifest = plan_rayjob(_jobs(), OPTIONS, IDENTITY, manifest=manifest)
    standing = plan_rayjob(_jobs(), OPTIONS, IDENTITY, cluster_name="shared-ray")

    assert from_manifest.body["spec"]["rayClusterSpec"] == manifest["spec"]
    assert from_manifest.body["metadata"]["labels"]["team"] == "ml"
    assert standing.standing_cluster == "shared-ray"
    assert standing.body["spec"]["clusterSelector"] == {"ray.io/cluster": "shared-ray"}


@pytest.mark.parametrize(
    ("request_fields", "expected"),
    [
        ({"spec": RayClusterSpec(), "cluster_name": "shared-ray"}, "exactly one cluster.*not both"),
        ({"spec": RayClusterSpec(), "manifest": {"kind": "RayCluster"}}, "spec or manifest, not both"),
        ({"manifest": {"apiVersion": "ray.io/v1", "kind": "RayJob"}}, "kind 'RayCluster'"),
        ({"rayjob_name": "Bad_Name"}, "RayJob name 'Bad_Name' is not valid"),
        ({"dashboard_url_template": "http://{nope}:8265"}, "unknown field"),
        ({"options": dataclasses.replace(OPTIONS, submission_mode="Interactive")}, "submission_mode"),
    ],
)
def test_plan_rejects_bad_input_without_an_api_call(request_fields: dict[str, Any], expected: str) -> None:
    with pytest.raises(RayInvalidInputError, match=expected):
        plan_rayjob(_jobs(), identity=IDENTITY, **{"options": OPTIONS, **request_fields})


def _status(**fields: Any) -> RayJobStatus:
    return RayJobStatus(name="rj", namespace="ml", job_id="sid", **fields)


@pytest.mark.parametrize(
    ("fields", "final", "success"),
    [
        ({}, False, False),
        ({"deployment_status": "Initializing"}, False, False),
        (
            {"deployment_status": "Running", "job_status": "SUCCEEDED"},
            False,
            False,
        ),  # submitter still running
        ({"deployment_status": "Complete", "job_status": "SUCCEEDED"}, True, True),
        ({"deployment_status": "Complete", "job_status": "STOPPED"}, True, False),
        ({"deployment_status": "Failed", "job_status": "FAILED", "reason": "AppFailed"}, True, False),
        ({"deployment_status": "Failed", "reason": "DeadlineExceeded"}, True, False),
        ({"deployment_status": "Retrying"}, False, False),
        ({"deployment_status": "Suspended"}, False, False),
    ],
)
def test_one_verdict_for_a_rayjob_status(fields: dict[str, Any], final: bool, success: bool) -> None:
    status = _status(**fields)

    assert (status.is_final, status.is_success) == (final, success)
    target = RayJobTarget(None, RayJobPlan("rj", "ns"))  # type: ignore[arg-type]
    assert target.restore(json.loads(json.dumps(dataclasses.asdict(RayJobLook(status))))).status == status


def test_status_is_read_from_the_object_kuberay_writes() -> None:
    obj = {
        "metadata": {"name": "rj", "namespace": "ml"},
        "spec": {"jobId": "sid", "suspend": True},
        "status": {"jobDeploymentStatus": "Failed", "jobStatus": "RUNNING", "reason": "DeadlineExceeded",
                   "message": "passed the activeDeadlineSeconds", "rayClusterName": "rj-raycluster-abcde",
                   "failed": 1},
    }  # fmt: skip
    status = RayJobStatus.from_object(obj)

    assert (status.job_id, status.cluster_name, status.failed, status.suspend) == (
        "sid",
        "rj-raycluster-abcde",
        1,
        True,
    )
    assert "reason=DeadlineExceeded" in status.summary() and "jobStatus=RUNNING" in status.summary()


def test_failure_carries_reason_message_log_tail_and_what_to_run() -> None:
    status = _status(deployment_status="Failed", job_status="RUNNING", reason="DeadlineExceeded",
                     message="The RayJob has passed the activeDeadlineSeconds")  # fmt: skip

    target = RayJobTarget(_jobs(), RayJobPlan(name="rj", namespace="ml"))
    with pytest.raises(KubeRayJobError) as info:
        target.result(RayJobLook(status), lambda: "step 1\nstep 2", 100)

    error = info.value
    assert (error.reason, error.deployment_status, error.submission_id) == (
        "DeadlineExceeded",
        "Failed",
        "sid",
    )
    assert error.log_tail == "step 1\nstep 2" and "step 2" in str(error)
    assert "activeDeadlineSeconds" in str(error) and "kubectl describe rayjob rj -n ml" in str(error)
    success = _status(deployment_status="Complete", job_status="SUCCEEDED", cluster_name="c")
    handle = RayClusterHandle(backend="kuberay", name="c", dashboard_url="http://head:8265", owned=False)
    result = target.result(RayJobLook(success, handle), lambda: "", 100)
    assert result["job_url"] == "http://head:8265/#/jobs/sid" and result["cluster_name"] == "c"


def test_handles_are_owned_unless_said_otherwise_and_old_handles_still_load() -> None:
    old = {"backend": "local", "name": "x", "dashboard_url": "http://127.0.0.1:1"}  # before ``owned`` existed

    assert RayClusterHandle.from_dict(old).owned is True
    standing = RayClusterHandle(backend="kuberay", name="shared", dashboard_url="http://h:8265", owned=False)
    assert RayClusterHandle.from_dict(standing.to_dict()) == standing


def test_no_backend_deletes_through_an_unowned_handle() -> None:
    """Both backends refuse before touching anything (the KubeRay one would fail on any API call)."""
    local = RayClusterHandle(
        backend="local", name="someone-elses", dashboard_url="http://127.0.0.1:1", owned=False
    )
    kube = RayClusterHandle(
        backend="kuberay", name="shared", namespace="ml", dashboard_url="http://h:1", owned=False
    )

    assert LocalBackend().delete(local, wait=True, timeout=1) is False
    assert _jobs().delete(kube, wait=True, timeout=1) is False


@pytest.mark.parametrize(("kind", "field"), [("RayCluster", "cluster_name"), ("RayJob", "rayjob_name")])
def test_a_retry_adopts_only_its_own_object_and_never_one_being_deleted(kind: str, field: str) -> None:
    from airflow_ray_provider.clusters.kuberay import check_ours
    from airflow_ray_provider.exceptions import RayClusterError

    obj = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "n1", "namespace": "ml"}}
    obj["metadata"]["labels"] = {"team": "other"}
    refused = rf"{kind} ml/n1 already exists and was not created by this task \(labels team=ml\); choose "
    refused += f"another {field} or delete it"
    with pytest.raises(RayClusterError, match=refused) as err:
        check_ours(obj, {"team": "ml"})
    assert (err.value.name, err.value.namespace) == ("n1", "ml")
    obj["metadata"].update(labels={"team": "ml"}, deletionTimestamp="2026-01-01T00:00:00Z")
    with pytest.raises(RayClusterError, match=f"{kind} ml/n1 is being deleted; retry once it is gone"):
        check_ours(obj, {"team": "ml"})
    check_ours({**obj, "metadata": {**obj["metadata"], "deletionTimestamp": None}}, {"team": "ml"})

"""The RayJob body and KubeRay's RayJob rules; every body checked against KubeRay 1.7's strict RayJob CRD."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from airflow_ray_provider.kuberay import (
    DEFAULT_TTL_SECONDS,
    KubeRaySpecError,
    RayClusterSpec,
    RayJobOptions,
    build_body,
    build_rayjob_body,
    ownership_labels,
)
from airflow_ray_provider.kuberay.rayjob import CLUSTER_SELECTOR_KEY
from airflow_ray_provider.kuberay.spec import LABEL_KUEUE_QUEUE, WorkerGroup
from tests.fixtures.crd import crd_schema, schema_errors
from tests.fixtures.kuberay_rayjob import kuberay_rules

pytestmark = pytest.mark.unit

OWNER = ownership_labels(dag_id="nightly", run_id="manual__2026-01-01", task_id="evaluate")
OPTIONS = RayJobOptions(entrypoint="python -m job --x 1", job_id="airflow-nightly-evaluate-x-0123456789")


def _cluster_spec(**fields: object) -> dict:
    spec = RayClusterSpec(worker_groups=[WorkerGroup("cpu", replicas=2, cpu="4", memory="16Gi")], **fields)
    return build_body(spec, name="rayjob-nightly-1", namespace="ml")["spec"]


def _body(options: RayJobOptions = OPTIONS, **kwargs: object) -> dict:
    arguments: dict = {"name": "rayjob-nightly-1", "namespace": "ml", "labels": OWNER}
    arguments.update(kwargs)
    if "cluster_name" not in arguments and "cluster_spec" not in arguments:
        arguments["cluster_spec"] = _cluster_spec()
    return build_rayjob_body(options, **arguments)


def _strict_errors(body: dict) -> list[str]:
    if crd_schema("ray.io_rayjobs.yaml") is None:
        pytest.skip("KubeRay reference data ../shared/kuberay is absent (a user's clone has none)")
    return schema_errors(body)


FULL = dataclasses.replace(
    OPTIONS,
    runtime_env={"pip": ["xgboost"], "env_vars": {"MODE": "full"}, "working_dir": "s3://bucket/code.zip"},
    metadata={"team": "ml"},
    entrypoint_num_cpus=1,
    entrypoint_num_gpus=0.5,
    entrypoint_resources={"accelerator": 1.0},
    ttl_seconds_after_finished=60,
    active_deadline_seconds=3600,
    backoff_limit=2,
    submission_mode="HTTPMode",
    suspend=True,
    queue_name="team-ml",
)
RULES = dataclasses.replace(
    OPTIONS,
    shutdown_after_job_finishes=False,
    pre_running_deadline_seconds=600,
    deletion_rules=[
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}},
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 60}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 3600}},
        {"policy": "DeleteCluster", "condition": {"jobDeploymentStatus": "Failed"}},
    ],
)
BODIES = {
    "defaults": lambda: _body(),
    "every field": lambda: _body(FULL),
    "secret auth": lambda: _body(cluster_spec=_cluster_spec(auth="secret")),
    "auth disabled, autoscaling": lambda: _body(
        cluster_spec=_cluster_spec(
            auth="disabled", enable_autoscaling=True, autoscaler_idle_timeout_seconds=30
        )
    ),
    "standing cluster": lambda: _body(cluster_name="shared-ray"),
    "deletion rules, pre-running deadline": lambda: _body(RULES),
    "SidecarMode": lambda: _body(dataclasses.replace(OPTIONS, submission_mode="SidecarMode")),
    "standing cluster, HTTPMode, deadline": lambda: _body(
        RayJobOptions(entrypoint="python x.py", submission_mode="HTTPMode", active_deadline_seconds=60),
        cluster_name="shared-ray",
    ),
}


@pytest.mark.parametrize("make", BODIES.values(), ids=BODIES.keys())
def test_every_body_validates_strictly_against_the_rayjob_crd_and_kuberay_rules(make) -> None:
    body = make()

    assert _strict_errors(body) == []
    assert kuberay_rules(body) is None


def test_body_fields_map_to_the_rayjob_spec() -> None:
    body = _body(FULL)
    spec = body["spec"]

    assert (body["apiVersion"], body["kind"]) == ("ray.io/v1", "RayJob")
    assert spec["jobId"] == OPTIONS.job_id and spec["entrypoint"] == "python -m job --x 1"
    assert yaml.safe_load(spec["runtimeEnvYAML"]) == FULL.runtime_env
    assert json.loads(spec["entrypointResources"]) == {"accelerator": 1.0}
    assert (spec["entrypointNumCpus"], spec["entrypointNumGpus"]) == (1, 0.5)
    assert (spec["shutdownAfterJobFinishes"], spec["ttlSecondsAfterFinished"]) == (True, 60)
    assert (spec["activeDeadlineSeconds"], spec["backoffLimit"]) == (3600, 2)
    assert (spec["submissionMode"], spec["suspend"], spec["metadata"]) == ("HTTPMode", True, {"team": "ml"})
    assert body["metadata"]["labels"] == {**OWNER, LABEL_KUEUE_QUEUE: "team-ml"}
    assert spec["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    assert "clusterSelector" not in spec


def test_defaults_shut_the_cluster_down_a_little_after_the_job() -> None:
    spec = _body()["spec"]

    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == DEFAULT_TTL_SECONDS
    assert spec["submissionMode"] == "K8sJobMode" and spec["suspend"] is False
    assert not {"runtimeEnvYAML", "activeDeadlineSeconds", "backoffLimit", "entrypointResources"} & set(spec)


def test_standing_cluster_uses_the_selector_and_never_asks_for_shutdown() -> None:
    spec = _body(cluster_name="shared-ray")["spec"]

    assert spec["clusterSelector"] == {CLUSTER_SELECTOR_KEY: "shared-ray"}
    assert not {"rayClusterSpec", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished", "suspend"} & set(
        spec
    )


@pytest.mark.parametrize(
    ("options", "kwargs", "expected"),
    [
        (OPTIONS, {"cluster_name": "shared-ray", "cluster_spec": {"headGroupSpec": {}}}, "not both"),
        (OPTIONS, {"cluster_spec": None}, "got neither"),
        (
            dataclasses.replace(OPTIONS, shutdown_after_job_finishes=False, ttl_seconds_after_finished=10),
            {},
            "ttl_seconds_after_finished needs shutdown_after_job_finishes=True",
        ),
        (
            dataclasses.replace(OPTIONS, ttl_seconds_after_finished=10),
            {"cluster_name": "shared-ray"},
            "ttl_seconds_after_finished needs",
        ),
        (
            dataclasses.replace(OPTIONS, ttl_seconds_after_finished=-1),
            {},
            "ttl_seconds_after_finished must be",
        ),
        (
            dataclasses.replace(OPTIONS, active_deadline_seconds=-5),
            {},
            "active_deadline_seconds must be a positive",
        ),
        (
            dataclasses.replace(OPTIONS, active_deadline_seconds=0),
            {},
            "active_deadline_seconds must be a positive",
        ),
        (dataclasses.replace(OPTIONS, backoff_limit=-1), {}, "backoff_limit must be a non-negative"),
        (
            dataclasses.replace(OPTIONS, backoff_limit=1),
            {"cluster_name": "shared-ray"},
            "backoff_limit is not",
        ),
        (dataclasses.replace(OPTIONS, submission_mode="Sidecar"), {}, "submission_mode must be one of"),
        (dataclasses.replace(OPTIONS, suspend=True), {"cluster_name": "shared-ray"}, "suspend needs"),
        (
            dataclasses.replace(OPTIONS, suspend=True, shutdown_after_job_finishes=False),
            {},
            "suspend needs shutdown_after_job_finishes=True",
        ),
        (dataclasses.replace(OPTIONS, runtime_env={"working_dir": "./code"}), {}, "is not a remote URI"),
        (dataclasses.replace(OPTIONS, runtime_env={"py_modules": ["s3://a.zip", "/x"]}), {}, r"\['/x'\]"),
        (dataclasses.replace(OPTIONS, entrypoint="  "), {}, "entrypoint is empty"),
        (dataclasses.replace(OPTIONS, entrypoint_num_cpus=-1), {}, "entrypoint_num_cpus must be"),
        (dataclasses.replace(OPTIONS, queue_name="bad queue"), {}, "queue_name"),
        (OPTIONS, {"name": "x" * 48}, "at most 47"),
        (OPTIONS, {"name": "Nightly_Eval"}, "RayJob name 'Nightly_Eval' is not valid"),
        (
            OPTIONS,
            {"cluster_name": "Shared_Ray"},
            "cluster 'Shared_Ray': RayCluster name should be a valid DNS1035 label",
        ),
        (
            OPTIONS,
            {
                "cluster_spec": {
                    "headGroupSpec": {},
                    "authOptions": {"mode": "token", "enableK8sTokenAuth": True},
                }
            },
            "enableK8sTokenAuth",
        ),
    ],
)
def test_bad_input_names_the_field(options, kwargs, expected) -> None:
    with pytest.raises(KubeRaySpecError, match=expected):
        _body(options, **kwargs)


def test_kuberays_own_rayjob_samples_pass_the_controller_rules() -> None:
    """The emulated controller's rules agree with KubeRay on KubeRay's own samples."""
    from tests.fixtures.crd import SHARED_KUBERAY

    samples = sorted((SHARED_KUBERAY / "samples").glob("ray-job.*.yaml"))
    if not samples:
        pytest.skip("KubeRay reference data ../shared/kuberay is absent (a user's clone has none)")
    checked = 0
    for path in samples:
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "RayJob" or "generateName" in document["metadata"]:
                continue
            assert kuberay_rules(document) is None, (
                path.name
            )  # (samples rely on CRD defaults: no schema check)
            checked += 1
    assert checked >= 10


def test_deletion_rules_and_pre_running_deadline_reach_the_body() -> None:
    spec = _body(RULES)["spec"]

    assert spec["preRunningDeadlineSeconds"] == 600 and spec["shutdownAfterJobFinishes"] is False
    assert "ttlSecondsAfterFinished" not in spec
    rules = spec["deletionStrategy"]["deletionRules"]
    assert [r["policy"] for r in rules] == ["DeleteWorkers", "DeleteCluster", "DeleteSelf", "DeleteCluster"]
    assert rules[3]["condition"] == {"jobDeploymentStatus": "Failed", "ttlSeconds": 0}  # KubeRay's default


def _rule(policy: str = "DeleteCluster", **condition: object) -> dict:
    return {"policy": policy, "condition": condition or {"jobStatus": "SUCCEEDED"}}


NO_SHUTDOWN = dataclasses.replace(OPTIONS, shutdown_after_job_finishes=False)


@pytest.mark.parametrize(
    ("options", "kwargs", "expected"),
    [
        (
            dataclasses.replace(OPTIONS, deletion_rules=[_rule()]),
            {},
            "deletion_rules and shutdown_after_job_finishes=True are mutually exclusive",
        ),
        (dataclasses.replace(NO_SHUTDOWN, deletion_rules=[]), {}, "non-empty list"),
        (
            dataclasses.replace(NO_SHUTDOWN, deletion_rules=[_rule("DeleteAll")]),
            {},
            r"deletion_rules\[0\].policy",
        ),
        (
            dataclasses.replace(
                NO_SHUTDOWN, deletion_rules=[_rule(jobStatus="FAILED", jobDeploymentStatus="Failed")]
            ),
            {},
            "exactly one of jobStatus",
        ),
        (
            dataclasses.replace(NO_SHUTDOWN, deletion_rules=[_rule(jobStatus="STOPPED")]),
            {},
            "jobStatus must be",
        ),
        (
            dataclasses.replace(NO_SHUTDOWN, deletion_rules=[_rule(jobStatus="FAILED", ttlSeconds=-1)]),
            {},
            r"deletion_rules\[0\].condition.ttlSeconds must be a non-negative",
        ),
        (
            dataclasses.replace(NO_SHUTDOWN, deletion_rules=[_rule(), _rule()]),
            {},
            r"deletion_rules\[1\]: a second DeleteCluster rule",
        ),
        (
            dataclasses.replace(
                NO_SHUTDOWN,
                deletion_rules=[
                    _rule("DeleteCluster", jobStatus="SUCCEEDED", ttlSeconds=60),
                    _rule("DeleteWorkers", jobStatus="SUCCEEDED", ttlSeconds=120),
                ],
            ),
            {},
            r"the DeleteCluster TTL \(60\) must be >= the DeleteWorkers TTL \(120\)",
        ),
        (
            dataclasses.replace(NO_SHUTDOWN, deletion_rules=[_rule("DeleteCluster")]),
            {"cluster_name": "shared-ray"},
            "not supported on a standing cluster",
        ),
        (
            dataclasses.replace(NO_SHUTDOWN, deletion_rules=[_rule("DeleteWorkers")]),
            {"cluster_spec": _cluster_spec(enable_autoscaling=True)},
            "DeleteWorkers is not supported with autoscaling",
        ),
        (
            dataclasses.replace(OPTIONS, pre_running_deadline_seconds=0),
            {},
            "pre_running_deadline_seconds must be a positive",
        ),
        (
            dataclasses.replace(OPTIONS, submission_mode="SidecarMode"),
            {"cluster_name": "shared-ray"},
            "SidecarMode.*standing cluster",
        ),
    ],
)
def test_kuberay_1_6_fields_refused_as_kuberay_refuses_them(options, kwargs, expected) -> None:
    with pytest.raises(KubeRaySpecError, match=expected):
        _body(options, **kwargs)


def test_sidecar_mode_needs_a_head_that_never_restarts() -> None:
    cluster_spec = _cluster_spec()
    cluster_spec["headGroupSpec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(KubeRaySpecError, match="restartPolicy Never or unset"):
        _body(dataclasses.replace(OPTIONS, submission_mode="SidecarMode"), cluster_spec=cluster_spec)


def test_the_test_controller_refuses_what_the_provider_refuses() -> None:
    """The controller's rules are written apart from the provider's: both refuse the same bodies."""
    body = _body(RULES)
    both = {**body, "spec": {**body["spec"], "shutdownAfterJobFinishes": True}}
    sidecar = _body(dataclasses.replace(OPTIONS, submission_mode="SidecarMode"))
    on_standing = {**sidecar, "spec": {k: v for k, v in sidecar["spec"].items() if k != "rayClusterSpec"}}
    on_standing["spec"]["clusterSelector"] = {CLUSTER_SELECTOR_KEY: "shared-ray"}
    unordered = json.loads(json.dumps(body))
    unordered["spec"]["deletionStrategy"]["deletionRules"][0]["condition"]["ttlSeconds"] = 100

    assert "mutually exclusive" in (kuberay_rules(both) or "")
    assert "ClusterSelector is not supported in SidecarMode" in (kuberay_rules(on_standing) or "")
    assert "TTLs must not decrease" in (kuberay_rules(unordered) or "")

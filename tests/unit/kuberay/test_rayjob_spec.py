"""The RayJob body and KubeRay's RayJob rules; every body checked against KubeRay 1.7's strict RayJob CRD."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from airflow_ray_provider.kuberay import labels as lb
from airflow_ray_provider.kuberay.builder import build_body
from airflow_ray_provider.kuberay.errors import KubeRaySpecError
from airflow_ray_provider.kuberay.rayjob_spec import (
    CLUSTER_SELECTOR_KEY,
    DEFAULT_TTL_SECONDS,
    KUEUE_QUEUE_LABEL,
    RayJobOptions,
    build_rayjob_body,
)
from airflow_ray_provider.kuberay.spec import RayClusterSpec, WorkerGroup
from tests.fixtures.crd import crd_schema, schema_errors
from tests.fixtures.kuberay_rayjob import kuberay_rules

pytestmark = pytest.mark.unit

OWNER = lb.ownership_labels(dag_id="nightly", run_id="manual__2026-01-01", task_id="evaluate")
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
    assert body["metadata"]["labels"] == {**OWNER, KUEUE_QUEUE_LABEL: "team-ml"}
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

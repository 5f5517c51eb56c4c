"""The spec builder and the manifest path against KubeRay 1.7's real RayCluster CRD schema."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from airflow_ray_provider.kuberay import (
    KubeRaySpecError,
    RayClusterSpec,
    build_body,
    generate_name,
    ownership_labels,
    prepare_manifest,
    token_ref_of,
)
from airflow_ray_provider.kuberay.client import ANNOTATION_EXPIRES_AT
from airflow_ray_provider.kuberay.spec import HeadGroup, WorkerGroup

OWNER = ownership_labels(
    dag_id="nightly_eval", run_id="scheduled__2024-01-01T00:00:00+00:00", task_id="create"
)
ANNOTATIONS = {ANNOTATION_EXPIRES_AT: "2030-01-01T00:00:00Z"}


@pytest.fixture(scope="module")
def crd_validator(kuberay_crd_schema: dict[str, Any]) -> Any:
    """The strict RayCluster validator (the fixture skips the module's CRD tests without ../shared)."""
    from tests.fixtures.crd import strict_validator
    from tests.fixtures.kuberay import RAYCLUSTER_CRD

    return strict_validator(RAYCLUSTER_CRD)


def _errors(validator: Any, body: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]


SPOT_GPU = WorkerGroup(
    name="gpu-spot",
    replicas=0,
    min_replicas=0,
    max_replicas=4,
    cpu="8",
    memory="32Gi",
    gpu=1,
    node_selector={"cloud.google.com/gke-spot": "true"},
    tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ],
)
PRODUCTION = RayClusterSpec.from_dict(
    {
        "ray_version": "2.52.0",
        "enable_autoscaling": True,
        "queue_name": "team-ml",
        "head": {
            "service_type": "LoadBalancer",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
        },
        "worker_groups": [
            {"name": "tpu", "replicas": 1, "max_replicas": 2, "resources": {"google.com/tpu": "4"}},
            {"name": "amd", "replicas": 0, "max_replicas": 2, "resources": {"amd.com/gpu": "1"}},
        ],
        "pods": {
            "labels": {"cost-center": "ml-42"},
            "annotations": {"sidecar.istio.io/inject": "false"},
            "secret_env": {"WANDB_API_KEY": "wandb/api-key"},
            "env_from_secrets": ["s3-credentials"],
            "image_pull_secrets": ["registry"],
            "priority_class_name": "batch-high",
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
            "volume_mounts": [{"name": "shm", "mountPath": "/dev/shm"},
                              {"name": "data", "mountPath": "/data", "readOnly": True}],
        },
    }
)  # fmt: skip
SPECS = {
    "default": RayClusterSpec(),
    "heterogeneous-autoscaling": RayClusterSpec(
        image="rayproject/ray:2.52.0-py311",
        ray_version="2.52.0",
        head=HeadGroup(cpu="2", memory="8Gi", ray_start_params={"num-cpus": "0"}),
        worker_groups=[
            WorkerGroup(name="cpu", replicas=2, max_replicas=10, cpu="4", memory="16Gi"),
            SPOT_GPU,
        ],
        enable_autoscaling=True,
        autoscaler_idle_timeout_seconds=120,
        env={"RAY_DEDUP_LOGS": "0"},
        service_account="ray-jobs",
        labels={"team": "ml"},
        annotations={"owner": "ml-platform@example.com"},
    ),
    "secret-auth": RayClusterSpec(auth="secret", worker_groups=[WorkerGroup(name="cpu")]),
    "production": PRODUCTION,
    "no-auth": RayClusterSpec(auth="disabled"),
}


@pytest.mark.unit
@pytest.mark.parametrize("key", sorted(SPECS))
def test_every_built_body_validates_against_the_crd(crd_validator, key):
    body = build_body(
        SPECS[key], name="nightly-eval-1a2b3c", namespace="ray", labels=OWNER, annotations=ANNOTATIONS
    )
    assert _errors(crd_validator, body) == []
    assert body["metadata"]["labels"].items() >= OWNER.items()


@pytest.mark.unit
def test_strict_schema_catches_an_unknown_field(crd_validator):
    body = build_body(RayClusterSpec(), name="c", namespace="ray")
    body["spec"]["headGroupSpec"]["replicaz"] = 1
    assert any("replicaz" in e for e in _errors(crd_validator, body))


@pytest.mark.unit
def test_heterogeneous_groups_autoscaling_and_auth_options():
    body = build_body(SPECS["heterogeneous-autoscaling"], name="c", namespace="ray")
    spec = body["spec"]
    assert spec["authOptions"] == {"mode": "token"}  # KubeRay >= 1.5.1 generates the token Secret
    assert spec["enableInTreeAutoscaling"] is True and spec["autoscalerOptions"] == {
        "idleTimeoutSeconds": 120
    }
    cpu, gpu = spec["workerGroupSpecs"]
    assert (cpu["replicas"], cpu["minReplicas"], cpu["maxReplicas"]) == (2, 2, 10)
    assert (gpu["replicas"], gpu["minReplicas"], gpu["maxReplicas"]) == (0, 0, 4)
    gpu_pod = gpu["template"]["spec"]
    assert gpu_pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert gpu_pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert [t["key"] for t in gpu_pod["tolerations"]] == ["nvidia.com/gpu", "cloud.google.com/gke-spot"]
    assert gpu_pod["serviceAccountName"] == "ray-jobs"
    head = spec["headGroupSpec"]
    assert head["rayStartParams"] == {"num-cpus": "0"}
    assert {"name": "RAY_DEDUP_LOGS", "value": "0"} in head["template"]["spec"]["containers"][0]["env"]
    assert {p["name"] for p in head["template"]["spec"]["containers"][0]["ports"]} == {
        "gcs-server", "dashboard", "client",
    }  # fmt: skip
    assert spec["rayVersion"] == "2.52.0"
    assert body["metadata"]["labels"] == {"team": "ml"}


@pytest.mark.unit
def test_secret_auth_wires_every_container_to_the_provider_secret():
    body = build_body(SPECS["secret-auth"], name="c1", namespace="ray")
    assert "authOptions" not in body["spec"]
    containers = [body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]]
    containers += [g["template"]["spec"]["containers"][0] for g in body["spec"]["workerGroupSpecs"]]
    for container in containers:
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "c1-ray-token",
            "key": "auth_token",
        }
    ref = token_ref_of(body)
    assert ref is not None and (ref.secret_name, ref.provider_created) == ("c1-ray-token", True)
    assert token_ref_of(build_body(SPECS["no-auth"], name="c1", namespace="ray")) is None
    auth_options = token_ref_of(build_body(RayClusterSpec(), name="c1", namespace="ray"))
    assert auth_options is not None and (auth_options.secret_name, auth_options.provider_created) == (
        "c1",
        False,
    )


@pytest.mark.unit
def test_sample_manifest_passes_through_unchanged_but_for_ownership(kuberay_sample_manifest, crd_validator):
    original = copy.deepcopy(kuberay_sample_manifest)
    body = prepare_manifest(
        kuberay_sample_manifest, name="generated", namespace="ray", labels=OWNER, annotations=ANNOTATIONS
    )
    assert kuberay_sample_manifest == original  # the caller's dict is not mutated
    assert _errors(crd_validator, body) == []
    meta = body.pop("metadata")
    original_meta = original.pop("metadata")
    assert body == original
    assert meta == {
        **original_meta, "name": "generated", "namespace": "ray", "labels": OWNER, "annotations": ANNOTATIONS
    }  # fmt: skip


@pytest.mark.unit
def test_manifest_from_yaml_file_gets_generated_name(tmp_path, crd_validator):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "apiVersion: ray.io/v1\nkind: RayCluster\nspec:\n  headGroupSpec:\n    rayStartParams: {}\n"
        "    template:\n      spec:\n        containers: [{name: ray-head, image: rayproject/ray:2.52.0}]\n"
    )
    body = prepare_manifest(
        str(path), name="ray-gen-abc", namespace="ray", labels=OWNER, annotations=ANNOTATIONS
    )
    assert body["metadata"]["name"] == "ray-gen-abc"
    assert _errors(crd_validator, body) == []


@pytest.mark.unit
def test_generated_names_are_dns_safe_stable_per_task_and_unique_per_run():
    kwargs = {"prefix": "ray", "dag_id": "Nightly_Eval.Champion vs Challenger" * 3, "task_id": "create"}
    first = generate_name(run_id="scheduled__2024-01-01T00:00:00+00:00", **kwargs)
    again = generate_name(run_id="scheduled__2024-01-01T00:00:00+00:00", **kwargs)
    other = generate_name(run_id="scheduled__2024-01-02T00:00:00+00:00", **kwargs)
    mapped = generate_name(run_id="scheduled__2024-01-01T00:00:00+00:00", map_index=3, **kwargs)
    assert first == again and len({first, other, mapped}) == 3
    for name in (first, other, mapped):
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 40


def _group(**kw: Any) -> WorkerGroup:
    return WorkerGroup(**{"name": "cpu", **kw})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("spec", "name", "expected"),
    [
        (
            RayClusterSpec(worker_groups=[_group(replicas=-1)]),
            "ok",
            "replicas must be a non-negative integer",
        ),
        (
            RayClusterSpec(worker_groups=[_group(max_replicas=-2)]),
            "ok",
            "max_replicas must be a non-negative",
        ),
        (RayClusterSpec(worker_groups=[_group(min_replicas=5, max_replicas=2)]), "ok", "must not exceed"),
        (
            RayClusterSpec(worker_groups=[_group(replicas=0, min_replicas=1, max_replicas=2)]),
            "ok",
            "must lie between",
        ),
        (RayClusterSpec(worker_groups=[_group(), _group()]), "ok", "is used twice"),
        (RayClusterSpec(worker_groups=[_group(name="GPU")]), "ok", "DNS-1123"),
        (RayClusterSpec(worker_groups=[_group(cpu="two")]), "ok", "not a Kubernetes quantity"),
        (RayClusterSpec(worker_groups=[_group(tolerations=[{"keys": "x"}])]), "ok", "tolerations"),
        (RayClusterSpec(head=HeadGroup(ray_start_params={"num-cpus": 0})), "ok", "strings to strings"),  # type: ignore[dict-item]
        (RayClusterSpec(labels={"bad key!": "x"}), "ok", "spec.labels key 'bad key!': not a qualified name"),
        (RayClusterSpec(auth="tls"), "ok", "spec.auth must be one of"),
        (RayClusterSpec(image=" "), "ok", "spec.image is empty"),
        (RayClusterSpec(), "1-starts-with-digit", "cluster name"),
        (RayClusterSpec(), "x" * 64, "cluster name"),
        (RayClusterSpec(), "Upper", "cluster name"),
    ],
)
def test_bad_specs_are_rejected_with_what_to_fix(spec, name, expected):
    with pytest.raises(KubeRaySpecError, match=re.escape(expected)):
        build_body(spec, name=name, namespace="ray")


@pytest.mark.unit
def test_spec_from_dict_rejects_unknown_fields_and_builds_groups():
    spec = RayClusterSpec.from_dict(
        {
            "head": {"cpu": "1"},
            "worker_groups": [{"name": "cpu", "replicas": 2, "cpu": "500m"}],
            "auth": "secret",
        }
    )
    assert spec.worker_groups[0].replicas == 2 and spec.total_cpus == pytest.approx(2.0)
    with pytest.raises(
        KubeRaySpecError, match=r"spec\.worker_groups\[0\] has unknown field\(s\) \['replica'\]"
    ):
        RayClusterSpec.from_dict({"worker_groups": [{"name": "cpu", "replica": 2}]})
    with pytest.raises(KubeRaySpecError, match=r"spec has unknown field\(s\) \['workers'\]"):
        RayClusterSpec.from_dict({"workers": []})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"apiVersion": "v1", "kind": "Pod", "spec": {}}, "apiVersion 'ray.io/v1'"),
        ({"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {}}, "headGroupSpec is required"),
        (
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "spec": {"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "w", "replicas": -1}]},
            },
            "replicas must be a non-negative integer",
        ),
        (
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": "mine", "namespace": "other"},
                "spec": {"headGroupSpec": {}},
            },
            "manifest metadata.namespace 'other' differs from the namespace the cluster is created in ('ray'",
        ),
        ("just: [unclosed", "not valid YAML"),
        ("missing-file.yaml", "does not exist"),
    ],
)
def test_bad_manifests_are_rejected(manifest, expected):
    with pytest.raises(KubeRaySpecError, match=re.escape(expected)):
        prepare_manifest(manifest, name="gen", namespace="ray", labels=OWNER, annotations=ANNOTATIONS)

"""The typed spec's production fields land where Kubernetes and KubeRay read them (CRD: test_spec)."""

from __future__ import annotations

import re

import pytest

from airflow_ray_provider.kuberay import KubeRaySpecError, RayClusterSpec, build_body
from tests.unit.kuberay.test_spec import PRODUCTION


@pytest.mark.unit
def test_production_fields_reach_every_pod():
    body = build_body(PRODUCTION, name="prod", namespace="ray")
    spec = body["spec"]
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml" and spec["suspend"] is True
    head = spec["headGroupSpec"]
    assert head["serviceType"] == "LoadBalancer" and head["rayStartParams"]["num-cpus"] == "0"
    assert "nodeAffinity" in head["template"]["spec"]["affinity"]
    templates = [head["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    for template in templates:
        assert template["metadata"]["labels"] == {"cost-center": "ml-42"}
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
        pod = template["spec"]
        assert pod["imagePullSecrets"] == [{"name": "registry"}] and pod["priorityClassName"] == "batch-high"
        assert [v["name"] for v in pod["volumes"]] == ["shm", "data"]
        container = pod["containers"][0]
        assert {
            "name": "WANDB_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
        } in (container["env"])
        assert container["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
        assert [m["mountPath"] for m in container["volumeMounts"]] == ["/dev/shm", "/data"]
        assert "WANDB" not in str([e.get("value") for e in container["env"]])  # no plain-text secret
    tpu, amd = (g["template"]["spec"]["containers"][0]["resources"] for g in spec["workerGroupSpecs"])
    assert tpu["limits"]["google.com/tpu"] == tpu["requests"]["google.com/tpu"] == "4"
    assert amd["limits"]["amd.com/gpu"] == "1"


@pytest.mark.unit
def test_an_explicit_head_num_cpus_wins_over_the_autoscaling_default():
    spec = RayClusterSpec.from_dict(
        {"enable_autoscaling": True, "head": {"ray_start_params": {"num-cpus": "1"}}}
    )
    assert (
        build_body(spec, name="h", namespace="ray")["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"]
        == "1"
    )
    fixed = build_body(RayClusterSpec(), name="h", namespace="ray")
    assert "num-cpus" not in fixed["spec"]["headGroupSpec"]["rayStartParams"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"pods": {"secret_env": {"KEY": "no-key"}}},
            "spec.pods.secret_env['KEY'] must be 'secret-name/key'",
        ),
        (
            {"pods": {"volume_mounts": [{"name": "x", "mountPath": "/x"}]}},
            "needs a mountPath and a name among",
        ),
        ({"pods": {"priority_class_name": "High"}}, "spec.pods.priority_class_name 'High'"),
        ({"pods": {"labels": {"a b": "c"}}}, "spec.pods.labels key 'a b': not a qualified name"),
        ({"head": {"service_type": "Ingress"}}, "spec.head.service_type must be one of ['ClusterIP'"),
        ({"head": {"affinity": {"nodeSelector": {}}}}, "spec.head.affinity must be a dict with keys among"),
        ({"worker_groups": [{"name": "w", "resources": {"cpu": "2"}}]}, "resources key 'cpu'"),
        (
            {"worker_groups": [{"name": "w", "resources": {"google.com/tpu": "four"}}]},
            "not a Kubernetes quantity",
        ),
        ({"queue_name": "bad queue"}, "spec.queue_name"),
        ({"pods": {"unknown": 1}}, "spec.pods has unknown field(s) ['unknown']"),
    ],
)
def test_bad_production_fields_name_the_field(spec, expected):
    with pytest.raises(KubeRaySpecError, match=re.escape(expected)):
        build_body(RayClusterSpec.from_dict(spec), name="bad", namespace="ray")

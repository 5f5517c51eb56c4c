"""KubeRay's controller rules, one test each: refused before any API call, naming the field and the rule."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from airflow_ray_provider.kuberay import KubeRaySpecError, RayClusterSpec, build_body
from airflow_ray_provider.kuberay.spec import HeadGroup, WorkerGroup
from airflow_ray_provider.kuberay.validation import check_raycluster, kuberay_secret_name

Body = dict[str, Any]
W = "spec.workerGroupSpecs.0"
TOL = f"{W}.template.spec.tolerations"
MINMAX = "worker groups need both minReplicas and maxReplicas"


def _valid() -> Body:
    spec = RayClusterSpec(ray_version="2.52.0", worker_groups=[WorkerGroup(name="cpu")])
    return build_body(spec, name="rules", namespace="ray")


def _head(body: Body) -> Body:
    return body["spec"]["headGroupSpec"]


def _worker(body: Body) -> Body:
    return body["spec"]["workerGroupSpecs"][0]


def _head_env(body: Body, name: str, value: str) -> None:
    _head(body)["template"]["spec"]["containers"][0].setdefault("env", []).append(
        {"name": name, "value": value}
    )


def _set(path: str, value: Any) -> Callable[[Body], None]:
    def apply(body: Body) -> None:
        *parents, last = path.split(".")
        node = body
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[last] = value

    return apply


def _do(*steps: Callable[[Body], None]) -> Callable[[Body], None]:
    def apply(body: Body) -> None:
        for step in steps:
            step(body)

    return apply


RULES: dict[str, tuple[Callable[[Body], None], str]] = {
    "name longer than 53": (_set("metadata.name", "a" * 54), "RayCluster name should be no more than 53"),
    "name not DNS-1035": (_set("metadata.name", "9lives"), "'9lives': RayCluster name should be a valid DNS"),
    "head without containers": (
        _set("spec.headGroupSpec.template.spec.containers", []), "spec.headGroupSpec.template.spec.containers"
    ),
    "worker without containers": (
        _set(f"{W}.template.spec.containers", []), "the cpu group needs"
    ),
    "resources and rayStartParams": (
        _do(_set(f"{W}.resources", {"CPU": "2"}),
            _set(f"{W}.rayStartParams", {"num-cpus": "2"})),
        "spec.workerGroupSpecs[0].resources: resource fields should not be set in both",
    ),
    "rayStartParams labels": (
        _set("spec.headGroupSpec.rayStartParams", {"labels": "a=b"}), "rayStartParams.labels"
    ),
    "group label key": (_set(f"{W}.labels", {"bad key": "x"}), "labels key 'bad key'"),
    "group label value": (_set(f"{W}.labels", {"zone": "a b"}), "value 'a b'"),
    "min/max missing without autoscaling": (
        lambda b: _worker(b).pop("maxReplicas"),
        f"spec.workerGroupSpecs[0] ('cpu'): {MINMAX}",
    ),
    "suspended worker group": (_set(f"{W}.suspend", True), "RayJobDeletionPolicy"),
    "suspended group with autoscaler": (
        _do(_set("spec.enableInTreeAutoscaling", True), _set(f"{W}.suspend", True)),
        "cannot be suspended with the autoscaler enabled",
    ),
    "ft annotation and options": (
        _do(_set("metadata.annotations", {"ray.io/ft-enabled": "true"}),
            _set("spec.gcsFaultToleranceOptions", {"redisAddress": "redis:6379"})),
        "metadata.annotations['ray.io/ft-enabled']",
    ),
    "RAY_REDIS_ADDRESS without ft": (
        lambda b: _head_env(b, "RAY_REDIS_ADDRESS", "redis:6379"), "implicitly enables GCS fault tolerance"
    ),
    "redis-password with ft options": (
        _do(_set("spec.gcsFaultToleranceOptions", {"redisAddress": "redis:6379"}),
            _set("spec.headGroupSpec.rayStartParams", {"redis-password": "x"})),
        "rayStartParams redis-password",
    ),
    "REDIS_PASSWORD env with ft options": (
        _do(_set("spec.gcsFaultToleranceOptions", {"redisAddress": "redis:6379"}),
            lambda b: _head_env(b, "REDIS_PASSWORD", "x")),
        "env REDIS_PASSWORD",
    ),
    "external storage annotation with ft options": (
        _do(_set("spec.gcsFaultToleranceOptions", {"redisAddress": "redis:6379"}),
            _set("metadata.annotations", {"ray.io/external-storage-namespace": "x"})),
        "annotation ray.io/external-storage-namespace",
    ),
    "redis username": (lambda b: _head_env(b, "REDIS_USERNAME", "u"), "redis username"),
    "autoscaler v2 env without autoscaling": (
        lambda b: _head_env(b, "RAY_enable_autoscaler_v2", "1"), "env RAY_enable_autoscaler_v2"
    ),
    "autoscaler version and env": (
        _do(_set("spec.enableInTreeAutoscaling", True), _set("spec.autoscalerOptions", {"version": "v2"}),
            lambda b: _head_env(b, "RAY_enable_autoscaler_v2", "1")),
        "spec.autoscalerOptions.version",
    ),
    "autoscaler v2 restartPolicy": (
        _do(_set("spec.enableInTreeAutoscaling", True), _set("spec.autoscalerOptions", {"version": "v2"}),
            _set(f"{W}.template.spec.restartPolicy", "Always")),
        "spec.workerGroupSpecs[0].template.spec.restartPolicy",
    ),
    "token auth without rayVersion": (lambda b: b["spec"].pop("rayVersion"), "rayVersion is not set"),
    "token auth, rayVersion 'latest'": (_set("spec.rayVersion", "latest"), "spec.rayVersion 'latest'"),
    "token auth, rayVersion 2.51.9": (_set("spec.rayVersion", "2.51.9"), "minimum Ray version is 2.52.0"),
    "k8s token auth below 2.55": (
        _set("spec.authOptions", {"mode": "token", "enableK8sTokenAuth": True}), "minimum Ray version is 2.55"
    ),
    "toleration operator": (
        _set(TOL, [{"key": "gpu", "operator": "Exist"}]),
        "tolerations[0].operator 'Exist': must be one of ['Equal', 'Exists']",
    ),
    "toleration effect": (
        _set(TOL, [{"key": "gpu", "effect": "NoScheduling"}]),
        "tolerations[0].effect 'NoScheduling'",
    ),
    "toleration Exists with value": (
        _set(TOL, [{"key": "g", "operator": "Exists", "value": "x"}]),
        "must be empty when operator is 'Exists'",
    ),
    "toleration without key": (
        _set(TOL, [{"operator": "Equal", "value": "x"}]),
        "must be 'Exists' when key is empty",
    ),
    "tolerationSeconds without NoExecute": (
        _set(TOL, [{"key": "g", "tolerationSeconds": 5}]),
        "only valid with effect 'NoExecute'",
    ),
    "node-selector key": (
        _set("spec.headGroupSpec.template.spec.nodeSelector", {"pool name": "gpu"}),
        "spec.headGroupSpec.template.spec.nodeSelector key 'pool name'",
    ),
}  # fmt: skip


@pytest.mark.unit
def test_the_base_body_passes():
    check_raycluster(_valid())


@pytest.mark.unit
@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_controller_rule_refuses_naming_field_and_rule(rule):
    mutate, expected = RULES[rule]
    body = copy.deepcopy(_valid())
    mutate(body)
    with pytest.raises(KubeRaySpecError, match=re.escape(expected)) as err:
        check_raycluster(body)
    assert "KubeRay's controller refuses this" in str(err.value)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("version", "ok"),
    [("2.52.0", True), ("2.52", True), ("v2.53.1", True), ("2.60.0rc1", True), ("3.0", True),
     ("2.51.99", False), ("latest", False), ("2", False), ("nightly-2.52", False)],
)  # fmt: skip
def test_ray_version_is_parsed_like_kuberay(version, ok):
    body = _valid()
    body["spec"]["rayVersion"] = version
    if ok:
        check_raycluster(body)
    else:
        with pytest.raises(KubeRaySpecError, match=r"spec\.rayVersion"):
            check_raycluster(body)


@pytest.mark.unit
def test_builder_refuses_before_any_call_and_names_the_rule():
    with pytest.raises(KubeRaySpecError, match=r"minimum Ray version is 2\.52\.0"):
        build_body(RayClusterSpec(ray_version="2.50.0"), name="old", namespace="ray")
    with pytest.raises(KubeRaySpecError, match="not parsable"):
        build_body(RayClusterSpec(ray_version="latest"), name="old", namespace="ray")
    with pytest.raises(KubeRaySpecError, match="no more than 53"):
        build_body(RayClusterSpec(), name="a" * 54, namespace="ray")
    with pytest.raises(KubeRaySpecError, match=r"spec\.head\.tolerations\[0\]\.operator 'Exist'"):
        build_body(RayClusterSpec(head=HeadGroup(tolerations=[{"key": "a", "operator": "Exist"}])), name="t",
                   namespace="ray")  # fmt: skip
    with pytest.raises(KubeRaySpecError, match=r"node_selector key 'a b'"):
        group = WorkerGroup(name="w", node_selector={"a b": "x"})
        build_body(RayClusterSpec(worker_groups=[group]), name="t", namespace="ray")
    build_body(RayClusterSpec(ray_version="2.50.0", auth="disabled"), name="old", namespace="ray")


@pytest.mark.unit
def test_valid_values_the_issue_lists_are_accepted():
    spec = RayClusterSpec(service_account="ray.jobs", head=HeadGroup(cpu="1e3"),
                          worker_groups=[WorkerGroup(name="w", cpu="1.5", memory="1E9")])  # fmt: skip
    body = build_body(spec, name="a" * 53, namespace="ray")
    assert body["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == "ray.jobs"
    assert spec.total_cpus == pytest.approx(1001.5)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("cluster", "secret"),
    [
        ("short", "short"),
        ("a" * 50, "a" * 50),
        ("b" + "a" * 50, "a" * 50),  # KubeRay keeps the last 50 characters
        ("x" * 10 + "-" + "y" * 42, "x" * 7 + "-" + "y" * 42),
        ("abc" + "-" + "z" * 49, "r" + "z" * 49),  # a leading '-' after truncation becomes 'r'
        ("abc" + "9" + "z" * 49, "r" + "z" * 49),  # so does a leading digit
    ],
)
def test_token_secret_name_is_kubernetes_checkname(cluster, secret):
    assert kuberay_secret_name(cluster) == secret
    assert len(kuberay_secret_name(cluster)) <= 50

"""Connection and spec errors name the connection id, the field and the valid choices."""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError


def _hook(**extra):
    from airflow.sdk import Connection

    from airflow_ray_provider.hooks.kuberay import KubeRayHook

    connection = Connection(conn_id="k8s_prod", conn_type="kuberay", extra=json.dumps(extra))
    return KubeRayHook("k8s_prod", connection=connection)


@pytest.mark.unit
def test_missing_kube_config_path_names_connection_and_path(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(RayInvalidInputError) as err:
        _ = _hook(kube_config_path=path).api_client
    assert f"connection 'k8s_prod': Extra kube_config_path '{path}' is not a file" in str(err.value)
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(RayInvalidInputError, match=r"'k8s_prod'.*is not a usable kubeconfig"):
        _ = _hook(kube_config_path=str(broken)).api_client


@pytest.mark.unit
def test_bad_ray_auth_names_connection_and_choices():
    with pytest.raises(RayInvalidInputError) as err:
        _ = _hook(ray_auth="tls").settings
    choices = "['auth_options', 'secret', 'disabled']"
    assert str(err.value) == f"connection 'k8s_prod': Extra ray_auth must be one of {choices}, got 'tls'"
    assert _hook().settings.ray_auth == "auth_options"


@pytest.mark.unit
def test_bad_namespace_names_its_source():
    from airflow_ray_provider.clusters import ClusterRequest, KubeRayBackend, KubeRaySettings, TaskIdentity

    def no_client():  # pragma: no cover - planning never builds the client
        raise AssertionError("plan made an API call")

    backend = KubeRayBackend(KubeRaySettings(conn_id="k8s_prod", namespace="Team_A"), no_client)
    identity = TaskIdentity("d", "r", "t")
    with pytest.raises(
        RayInvalidInputError, match="connection 'k8s_prod': Extra namespace 'Team_A' is not a valid"
    ):
        backend.plan(ClusterRequest(), identity)
    with pytest.raises(RayInvalidInputError, match=r"the operator's namespace 'a\.b' is not a valid"):
        backend.plan(ClusterRequest(namespace="a.b"), identity)


@pytest.mark.unit
def test_replicas_above_max_replicas_is_named_as_such():
    from airflow_ray_provider.kuberay import KubeRaySpecError, RayClusterSpec, build_body
    from airflow_ray_provider.kuberay.spec import WorkerGroup

    spec = RayClusterSpec(worker_groups=[WorkerGroup(name="w", replicas=5, max_replicas=2)])
    with pytest.raises(
        KubeRaySpecError, match=r"spec\.worker_groups\[0\]\.replicas \(5\) must not exceed max_replicas \(2\)"
    ):
        build_body(spec, name="r", namespace="ray")

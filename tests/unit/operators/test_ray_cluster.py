"""Operator and hook construction: input checks at parse time, local summarisation, connection parsing."""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay import RayClusterSpec
from airflow_ray_provider.kuberay.spec import WorkerGroup


@pytest.mark.unit
def test_create_rejects_bad_input_when_the_dag_is_parsed():
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    with pytest.raises(RayInvalidInputError, match="either spec or manifest"):
        CreateRayClusterOperator(task_id="c", spec={}, manifest={})
    with pytest.raises(RayInvalidInputError, match="replicas must be a non-negative integer"):
        CreateRayClusterOperator(
            task_id="c", spec=RayClusterSpec(worker_groups=[WorkerGroup("w", replicas=-1)])
        )
    with pytest.raises(RayInvalidInputError, match="expiry must be positive"):
        CreateRayClusterOperator(task_id="c", expiry=0)


@pytest.mark.unit
def test_a_typed_spec_is_kept_as_plain_data_and_round_trips():
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    groups = [WorkerGroup("gpu", replicas=0, max_replicas=2, gpu=1)]
    spec = RayClusterSpec(worker_groups=groups, auth="secret")
    op = CreateRayClusterOperator(task_id="c", spec=spec)
    assert isinstance(op.spec, dict) and json.loads(json.dumps(op.spec)) == op.spec
    assert RayClusterSpec.from_dict(op.spec) == spec


@pytest.mark.unit
def test_local_backend_summarises_the_spec_into_cpus_and_gpus():
    from airflow_ray_provider.clusters import ClusterRequest, LocalBackend, LocalClusterOptions, TaskIdentity

    def local_options_for(request: ClusterRequest) -> LocalClusterOptions:
        return LocalBackend().plan(request, TaskIdentity("d", "r", "t")).config

    spec = RayClusterSpec.from_dict(
        {"head": {"cpu": "1"}, "worker_groups": [{"name": "a", "replicas": 64, "cpu": "2"}]}
    )
    options = local_options_for(ClusterRequest(spec=spec))
    assert options.num_gpus == 0  # the spec asks for none
    assert 1 <= options.num_cpus <= 129  # capped at this machine's cores
    explicit = local_options_for(ClusterRequest(spec=spec, local_options=LocalClusterOptions(num_cpus=3)))
    assert explicit.num_cpus == 3
    assert local_options_for(ClusterRequest()).num_cpus is None  # no spec: every core
    with pytest.raises(ValueError, match="unknown key"):
        LocalClusterOptions.from_value({"cpus": 2})


@pytest.mark.unit
def test_hook_builds_a_client_from_inline_kubeconfig_without_touching_global_config(monkeypatch):
    from kubernetes import client

    from airflow_ray_provider.hooks.kuberay import KubeRayHook

    before = client.Configuration.get_default_copy().host
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "a", "cluster": {"server": "https://k8s.example.com:6443"}},
                     {"name": "b", "cluster": {"server": "https://other.example.com"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "a", "user": "u"}},
                     {"name": "b", "context": {"cluster": "b", "user": "u"}}],
    }  # fmt: skip
    extra = {"kube_config": json.dumps(kubeconfig), "context": "b", "namespace": "ray", "ray_auth": "secret"}
    monkeypatch.setenv("AIRFLOW_CONN_KR_UNIT", json.dumps({"conn_type": "kuberay", "extra": extra}))

    hook = KubeRayHook(kuberay_conn_id="kr_unit")

    assert hook.api_client.configuration.host == "https://other.example.com"
    assert hook.namespace == "ray" and hook.settings.ray_auth == "secret" and hook.client.namespace == "ray"
    assert client.Configuration.get_default_copy().host == before
    hook.api_client.close()


@pytest.mark.unit
def test_hook_without_any_kubernetes_config_says_what_to_set(monkeypatch):
    from airflow_ray_provider.hooks.kuberay import KubeRayHook

    monkeypatch.setenv("AIRFLOW_CONN_KR_EMPTY", json.dumps({"conn_type": "kuberay", "extra": {}}))
    with pytest.raises(RayInvalidInputError, match="in_cluster, kube_config_path or kube_config"):
        _ = KubeRayHook(kuberay_conn_id="kr_empty").api_client
    ok, message = KubeRayHook(kuberay_conn_id="kr_empty").test_connection()
    assert not ok and "in_cluster" in message


@pytest.mark.unit
def test_wrong_connection_type_is_rejected(monkeypatch):
    from airflow_ray_provider.hooks.kuberay import backend_for_connection

    monkeypatch.setenv("AIRFLOW_CONN_NOT_KR", json.dumps({"conn_type": "http", "host": "x"}))
    with pytest.raises(RayInvalidInputError, match="cluster_conn_id=None for a local"):
        backend_for_connection("not_kr")


MANIFEST_YAML = "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: {{ params.name }}\n"


@pytest.mark.unit
@pytest.mark.parametrize("where", ["absolute", "relative to the DAG folder", "no DAG, absolute"])
def test_a_manifest_yaml_path_renders_absolute_or_relative(tmp_path, where):
    """An absolute ``.yaml`` path used to fail with Jinja's ``TemplateNotFound``."""
    from airflow.sdk import DAG

    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    dag_folder = tmp_path / "dags"
    (dag_folder / "manifests").mkdir(parents=True)
    (dag_folder / "manifests" / "cluster.yaml").write_text(MANIFEST_YAML)
    absolute = str(dag_folder / "manifests" / "cluster.yaml")
    path = "manifests/cluster.yaml" if where.startswith("relative") else absolute
    if where.startswith("no DAG"):
        create = CreateRayClusterOperator(task_id="c", manifest=path)
    else:
        with DAG("manifest_dag", schedule=None, template_searchpath=None) as dag:
            create = CreateRayClusterOperator(task_id="c", manifest=path)
        dag.fileloc = str(dag_folder / "manifest_dag.py")  # the DAG folder is the DAG file's folder
    create.render_template_fields({"params": {"name": "ray-x"}})
    assert create.manifest == MANIFEST_YAML.replace("{{ params.name }}", "ray-x").rstrip("\n")

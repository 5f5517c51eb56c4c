"""The Ray job link's address for people: a ``kuberay`` connection's ``link_url_template``.

Airflow reaches a KubeRay head at its in-cluster address (``http://x-head-svc.ns.svc.cluster.local:8265``),
which no browser outside the cluster opens; the template gives the ingress a person uses.
"""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.clusters import ClusterPlan, cluster_link_url
from airflow_ray_provider.clusters.kuberay import KubeRayBackend, KubeRaySettings
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch import ClusterTarget

pytestmark = pytest.mark.unit

IN_CLUSTER = "http://nightly-head-svc.ray.svc.cluster.local:8265"


def test_the_template_names_the_cluster_and_its_namespace():
    url = cluster_link_url("https://ray.example.com/{namespace}/{name}/", "nightly", "ray")

    assert url == "https://ray.example.com/ray/nightly"


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("https://{service_ip}/", "not a template of {name} and {namespace}"),
        ("ray.example.com/{name}", "http(s)"),
    ],
)
def test_a_bad_template_names_the_extra(template, why):
    with pytest.raises(RayInvalidInputError, match="link_url_template") as excinfo:
        cluster_link_url(template, "nightly", "ray")
    assert why in str(excinfo.value)


def test_a_handle_links_to_the_browser_address_and_calls_the_in_cluster_one():
    linked = KubeRaySettings(conn_id="kr", link_url_template="https://ray.example.com/{namespace}/{name}")
    handle = KubeRayBackend(linked, lambda: None).handle(ClusterPlan("nightly", "ray"), IN_CLUSTER)
    backend = KubeRayBackend(KubeRaySettings(conn_id="kr"), lambda: None)  # no token: Kubernetes not asked
    target = ClusterTarget(handle=handle, backend=backend)
    target.reach(print)

    assert handle.link_url == "https://ray.example.com/ray/nightly"
    assert target.client is not None and target.client.address == IN_CLUSTER  # the Job API stays in-cluster
    assert target.dashboard_url == "https://ray.example.com/ray/nightly"  # the "Ray job" link


def test_without_a_template_the_link_is_the_address_airflow_uses():
    handle = KubeRayBackend(KubeRaySettings(conn_id="kr"), lambda: None).handle(
        ClusterPlan("nightly", "ray"), IN_CLUSTER
    )

    assert handle.link_url == IN_CLUSTER
    assert ClusterTarget(handle=handle).dashboard_url == IN_CLUSTER


def test_the_connection_checks_its_template_before_any_cluster_exists():
    from airflow.sdk import Connection

    from airflow_ray_provider.hooks.kuberay import KubeRayHook

    extra = {"in_cluster": True, "link_url_template": "https://ray.example.com/{cluster}"}
    connection = Connection(conn_id="k8s_prod", conn_type="kuberay", extra=json.dumps(extra))

    with pytest.raises(RayInvalidInputError, match="link_url_template"):
        _ = KubeRayHook("k8s_prod", connection=connection).settings

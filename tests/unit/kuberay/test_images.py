"""Images agree with ray_version; GPU groups on the default image get the GPU build."""

from __future__ import annotations

import logging
import re

import pytest

from airflow_ray_provider.kuberay import KubeRaySpecError, RayClusterSpec, build_body
from airflow_ray_provider.kuberay.builder import tag_version
from airflow_ray_provider.kuberay.spec import WorkerGroup

GROUPS = [WorkerGroup(name="cpu"), WorkerGroup(name="gpu", gpu=1)]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("image", "version"),
    [("rayproject/ray:2.52.0", "2.52.0"), ("rayproject/ray:2.52.0-py311-gpu", "2.52.0"),
     ("reg.io:5000/ml/ray:v2.53.1-cu121", "2.53.1"), ("rayproject/ray:2.52", "2.52"),
     ("rayproject/ray:latest", None), ("rayproject/ray", None), ("reg.io:5000/ray@sha256:abc", None)],
)  # fmt: skip
def test_tag_version(image, version):
    assert tag_version(image) == version


@pytest.mark.unit
def test_gpu_groups_default_to_the_gpu_image_of_the_ray_version():
    body = build_body(RayClusterSpec(ray_version="2.52.0", worker_groups=GROUPS), name="g", namespace="ray")
    images = [g["template"]["spec"]["containers"][0]["image"] for g in body["spec"]["workerGroupSpecs"]]
    assert images == ["rayproject/ray:2.52.0", "rayproject/ray:2.52.0-gpu"]
    assert (
        body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == "rayproject/ray:2.52.0"
    )


@pytest.mark.unit
def test_ray_version_follows_the_image_tag_when_not_given():
    tagged = build_body(RayClusterSpec(image="rayproject/ray:2.53.0-py311"), name="t", namespace="ray")
    assert tagged["spec"]["rayVersion"] == "2.53.0"
    by_default = build_body(
        RayClusterSpec(), name="t", namespace="ray", default_image="rayproject/ray:2.54.1"
    )
    assert by_default["spec"]["rayVersion"] == "2.54.1"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("spec", "default_image", "expected"),
    [
        (RayClusterSpec(image="rayproject/ray:2.50.0", ray_version="2.52.0"), None,
         "spec.image 'rayproject/ray:2.50.0' is Ray 2.50.0 but the cluster's ray_version is 2.52.0"),
        (RayClusterSpec(ray_version="2.53.0"), "rayproject/ray:2.52.0",
         "the connection's default_image 'rayproject/ray:2.52.0' is Ray 2.52.0"),
        (RayClusterSpec(ray_version="2.52.0", worker_groups=[WorkerGroup(name="w", image="ray:2.51.0-gpu")]),
         None, "spec.worker_groups[0].image 'ray:2.51.0-gpu' is Ray 2.51.0"),
    ],
)  # fmt: skip
def test_an_image_tag_that_disagrees_with_ray_version_fails(spec, default_image, expected):
    with pytest.raises(KubeRaySpecError, match=re.escape(expected)):
        build_body(spec, name="mismatch", namespace="ray", default_image=default_image)


@pytest.mark.unit
def test_a_tag_without_a_version_is_logged(caplog):
    with caplog.at_level(logging.WARNING):
        build_body(RayClusterSpec(image="ml/ray:latest", ray_version="2.52.0"), name="l", namespace="ray")
    assert (
        "spec.image 'ml/ray:latest' has no Ray version in its tag; assuming it runs Ray 2.52.0" in caplog.text
    )

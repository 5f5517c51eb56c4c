"""One set of spec rules for both backends, checked when the DAG is parsed where the spec allows it."""

from __future__ import annotations

import logging

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError

pytestmark = pytest.mark.unit

IDENTITY_ARGS = ("d", "manual__2026-01-01", "create_cluster")


def _local_plan(spec: dict) -> object:
    from airflow_ray_provider.clusters import ClusterRequest, LocalBackend, TaskIdentity

    return LocalBackend().plan(
        ClusterRequest.from_arguments(spec=spec, local_options=None), TaskIdentity(*IDENTITY_ARGS)
    )


def test_the_local_backend_refuses_what_kuberay_refuses():
    """Token auth (the default on both backends) needs Ray >= 2.52 on KubeRay: the local plan says so too."""
    with pytest.raises(RayInvalidInputError, match=r"rayVersion '2.40'.*minimum Ray version is 2.52.0"):
        _local_plan({"ray_version": "2.40"})
    with pytest.raises(RayInvalidInputError, match=r"2\.41\.0"):
        _local_plan({"ray_version": "2.52.0", "image": "rayproject/ray:2.41.0"})

    assert _local_plan({"ray_version": "2.40", "auth": "disabled"}) is not None  # no token: KubeRay agrees


def test_a_bad_dict_spec_fails_when_the_dag_is_parsed():
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator
    from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator

    with pytest.raises(RayInvalidInputError, match="replicas must be a non-negative integer"):
        CreateRayClusterOperator(task_id="c", spec={"worker_groups": [{"name": "w", "replicas": -1}]})
    with pytest.raises(RayInvalidInputError, match="bogus"):
        CreateRayClusterOperator(task_id="c", spec={"bogus": 1})
    with pytest.raises(RayInvalidInputError, match=r"minimum Ray version is 2\.52\.0"):
        CreateRayClusterOperator(task_id="c", spec={"ray_version": "2.40"})  # local: token auth
    with pytest.raises(RayInvalidInputError, match="replicas"):
        EphemeralRayJobOperator(
            task_id="e",
            entrypoint="python x.py",
            cluster_spec={"worker_groups": [{"name": "w", "replicas": -2}]},
        )


def test_what_only_the_run_can_decide_is_left_to_the_run():
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    templated = {"worker_groups": [{"name": "w", "replicas": "{{ params.replicas }}"}]}
    assert CreateRayClusterOperator(task_id="t", spec=templated).spec == templated  # rendered, then checked
    # With a kuberay connection, its ray_auth (unknown at parse time) decides whether token rules apply.
    CreateRayClusterOperator(task_id="k", cluster_conn_id="kuberay_prod", spec={"ray_version": "2.40"})


def test_an_attached_cluster_is_left_alone_because_this_task_does_not_own_it(caplog):
    from airflow_ray_provider.clusters import LocalBackend, RayClusterHandle

    handle = RayClusterHandle(
        backend="local", name="ray-other-dag", dashboard_url="http://127.0.0.1:1", owned=False
    )
    with caplog.at_level(logging.INFO, logger="airflow_ray_provider.clusters.backend"):
        assert LocalBackend().delete(handle) is False

    assert "this task does not own it" in caplog.text
    assert "did not create" not in caplog.text  # the provider may well have created it, for another DAG

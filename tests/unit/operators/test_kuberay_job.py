"""Bad input to the RayJob, one-task and attach operators fails at parse time or before any API call."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
from airflow_ray_provider.operators.ray_cluster import AttachRayClusterOperator
from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator
from tests.fixtures.ray_job import StandInTI, context_for

pytestmark = pytest.mark.unit

SPEC = {"worker_groups": [{"name": "cpu", "replicas": 1}]}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"spec": SPEC, "cluster": "shared-ray"}, "pass one cluster"),
        ({"manifest": {"kind": "RayCluster"}, "spec": SPEC}, "pass one cluster"),
        (
            {"shutdown_after_job_finishes": False, "ttl_seconds_after_finished": 60},
            "ttl_seconds_after_finished needs shutdown_after_job_finishes=True",
        ),
        ({"cluster": "shared-ray", "ttl_seconds_after_finished": 60}, "ttl_seconds_after_finished needs"),
        ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished must be a non-negative"),
        ({"active_deadline_seconds": -10}, "active_deadline_seconds must be a positive"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds must be a positive"),
        ({"backoff_limit": -1}, "backoff_limit must be a non-negative"),
        ({"cluster": "shared-ray", "backoff_limit": 2}, "backoff_limit is not supported on a standing"),
        ({"submission_mode": "InteractiveMode"}, "submission_mode must be one of"),
        ({"submission_mode": "k8sjobmode"}, "submission_mode must be one of"),
        ({"suspend": True, "cluster": "shared-ray"}, "suspend needs shutdown_after_job_finishes=True"),
        ({"suspend": True, "shutdown_after_job_finishes": False}, "suspend needs"),
        ({"entrypoint_num_gpus": -1}, "entrypoint_num_gpus must be a non-negative"),
        ({"entrypoint_resources": {"accelerator": -2}}, r"entrypoint_resources\['accelerator'\]"),
        ({"cleanup": "explode"}, "cleanup must be one of"),
        ({"suspend_on_kill": True, "cluster": "shared-ray"}, "suspend_on_kill needs"),
        ({"poll_interval": 0}, "poll_interval must be a positive number"),
    ],
)
def test_rayjob_operator_rejects_bad_input_when_the_dag_is_parsed(kwargs: dict[str, Any], expected: str):
    with pytest.raises(RayInvalidInputError, match=expected):
        KubeRayJobOperator(task_id="rj", entrypoint="python job.py", cluster_conn_id="kuberay_x", **kwargs)


def _fail_on_connection(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a connection was opened before the input was checked")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"entrypoint": "   "}, "entrypoint"),
        ({"runtime_env": {"working_dir": "./local/code"}}, "working_dir"),
        ({"rayjob_name": "Bad_Name"}, "RayJob name 'Bad_Name' is not valid"),
        ({"spec": {"head": {"cpus": "2"}}}, r"unknown field\(s\) \['cpus'\]"),
        ({"cluster": "Shared_Ray"}, "cluster 'Shared_Ray': RayCluster name should be a valid DNS1035 label"),
        ({"cluster": {"backend": "local", "name": "h", "dashboard_url": "http://x:1"}}, "KubeRay cluster"),
    ],
)
def test_rayjob_operator_rejects_rendered_input_before_any_api_call(
    kwargs: dict[str, Any], expected: str, monkeypatch: pytest.MonkeyPatch
):
    """Template-rendered fields are checked in ``execute`` before a Kubernetes client exists."""
    arguments = {"entrypoint": "python job.py", **kwargs}
    op = KubeRayJobOperator(task_id="rj", cluster_conn_id="kuberay_x", **arguments)
    monkeypatch.setattr(
        "airflow_ray_provider.operators.kuberay_job.rayjobs_for_connection", _jobs_without_api
    )

    with pytest.raises(RayInvalidInputError, match=expected):
        op.execute(context_for(StandInTI(dag_id="bad_input", task_id="rj")))


def _jobs_without_api(conn_id: str | None, namespace: str | None = None) -> Any:
    from airflow_ray_provider.clusters import KubeRayBackend, KubeRaySettings

    settings = KubeRaySettings(conn_id=conn_id or "kuberay_x", namespace=namespace or "ml")
    return KubeRayBackend(settings, _fail_on_connection)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"cluster": {"name": "x"}}, "creates its own cluster"),
        ({"ray_conn_id": "ray_default"}, "creates its own cluster"),
        ({"wait_for_completion": False}, "would delete the cluster under the job"),
        ({"cluster_spec": SPEC, "manifest": {"kind": "RayCluster"}}, "either cluster_spec or manifest"),
        ({"ready_timeout": 0}, "must be positive"),
        ({"delete_timeout": -1}, "must be positive"),
    ],
)
def test_one_task_operator_rejects_bad_input_when_the_dag_is_parsed(kwargs: dict[str, Any], expected: str):
    with pytest.raises(RayInvalidInputError, match=expected):
        EphemeralRayJobOperator(task_id="one", entrypoint="python job.py", **kwargs)


def test_attach_operator_rejects_an_empty_name_before_any_connection(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(
        "airflow_ray_provider.operators.ray_cluster.backend_for_connection", _fail_on_connection
    )
    op = AttachRayClusterOperator(task_id="attach", cluster_name="  ", cluster_conn_id="kuberay_x")

    with pytest.raises(RayInvalidInputError, match="cluster_name must name a running cluster"):
        op.execute(context_for(StandInTI(dag_id="bad_input", task_id="attach")))

"""Numbers given as Jinja templates: accepted when the DAG is parsed, numbers once rendered, or refused
naming the argument (before any job is submitted: rendering happens before ``execute``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay import KubeRaySpecError, RayClusterSpec
from airflow_ray_provider.kuberay.spec import validate_spec
from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from tests.fixtures.ray_job import StandInTI, context_for

pytestmark = pytest.mark.unit

TEMPLATED = {
    "entrypoint_num_cpus": "{{ params.cpus }}",
    "entrypoint_num_gpus": "{{ params.gpus }}",
    "entrypoint_memory": "{{ params.memory }}",
    "job_timeout": "{{ params.timeout }}",
}


def _submit(**kwargs: object) -> SubmitRayJobOperator:
    return SubmitRayJobOperator(task_id="submit", entrypoint="python x.py", ray_conn_id="ray_x", **kwargs)


def test_templated_job_numbers_render_to_numbers() -> None:
    """``job_timeout="{{ ... }}"`` used to fail at parse time (float of the template string)."""
    op = _submit(**TEMPLATED)
    op.render_template_fields({"params": {"cpus": "1.5", "gpus": 0, "memory": "2048", "timeout": "30"}})
    assert (op.entrypoint_num_cpus, op.entrypoint_num_gpus, op.entrypoint_memory) == (1.5, 0, 2048)
    assert op.job_timeout == 30.0 and isinstance(op.entrypoint_memory, int)


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"cpus": "lots", "gpus": 0, "memory": 1, "timeout": 1}, "entrypoint_num_cpus must be a number"),
        ({"cpus": 1, "gpus": 0, "memory": "1.5", "timeout": 1}, "entrypoint_memory must be a whole number"),
        ({"cpus": 1, "gpus": 0, "memory": 1, "timeout": "-5"}, "job_timeout must be a positive number"),
    ],
)
def test_a_rendered_value_that_is_no_number_names_the_argument(params: dict, needle: str) -> None:
    op = _submit(**TEMPLATED)
    with pytest.raises(RayInvalidInputError, match=needle):
        op.render_template_fields({"params": params})


def test_literal_numbers_are_still_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(RayInvalidInputError, match="job_timeout must be a positive number"):
        _submit(job_timeout=0)


def test_a_rendered_replicas_count_is_an_integer() -> None:
    spec = RayClusterSpec.from_dict(
        {"worker_groups": [{"name": "cpu", "replicas": "3", "max_replicas": " 5"}]}
    )
    group = spec.worker_groups[0]
    assert (group.replicas, group.max_replicas) == (3, 5)
    with pytest.raises(KubeRaySpecError, match="replicas must be a non-negative integer"):
        validate_spec(RayClusterSpec.from_dict({"worker_groups": [{"name": "cpu", "replicas": "three"}]}))


KUBERAY_TEMPLATED = {
    "entrypoint_num_cpus": "{{ params.cpus }}",
    "entrypoint_num_gpus": "{{ params.gpus }}",
    "active_deadline_seconds": "{{ params.deadline }}",
    "backoff_limit": "{{ params.retries }}",
}
KUBERAY_PARAMS = {"cpus": "0.5", "gpus": "0", "deadline": "600", "retries": 2}


def _rayjob(**kwargs: object) -> KubeRayJobOperator:
    return KubeRayJobOperator(task_id="rj", entrypoint="python job.py", cluster_conn_id="kuberay_x", **kwargs)


def _jobs_without_api(conn_id: str | None, namespace: str | None = None) -> Any:
    """KubeRay jobs whose Kubernetes client cannot be made: any API call fails the test."""
    from airflow_ray_provider.clusters import KubeRayBackend, KubeRaySettings

    def no_client(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a connection was opened before the input was checked")

    settings = KubeRaySettings(conn_id=conn_id or "kuberay_x", namespace=namespace or "ml")
    return KubeRayBackend(settings, no_client)


def test_templated_rayjob_numbers_parse_and_render_to_numbers() -> None:
    """KubeRayJobOperator took only literal numbers: a Jinja string failed when the DAG was parsed."""
    op = _rayjob(**KUBERAY_TEMPLATED)
    assert set(KUBERAY_TEMPLATED) <= set(op.template_fields)
    op.render_template_fields({"params": KUBERAY_PARAMS})
    assert (op.entrypoint_num_cpus, op.entrypoint_num_gpus) == (0.5, 0.0)
    assert (op.active_deadline_seconds, op.backoff_limit) == (600, 2)
    assert isinstance(op.active_deadline_seconds, int) and isinstance(op.backoff_limit, int)


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({**KUBERAY_PARAMS, "cpus": "many"}, "entrypoint_num_cpus must be a number; it rendered to 'many'"),
        ({**KUBERAY_PARAMS, "deadline": "1.5"}, "active_deadline_seconds must be a whole number"),
    ],
)
def test_a_rendered_rayjob_number_that_is_no_number_names_the_argument(params: dict, needle: str) -> None:
    op = _rayjob(**KUBERAY_TEMPLATED)
    with pytest.raises(RayInvalidInputError, match=needle):
        op.render_template_fields({"params": params})


def test_a_rendered_rayjob_number_out_of_range_fails_before_any_api_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op = _rayjob(**KUBERAY_TEMPLATED)
    op.render_template_fields({"params": {**KUBERAY_PARAMS, "cpus": "-1", "deadline": "0"}})
    monkeypatch.setattr(
        "airflow_ray_provider.operators.kuberay_job.rayjobs_for_connection", _jobs_without_api
    )
    with pytest.raises(RayInvalidInputError, match="active_deadline_seconds must be a positive integer"):
        op.execute(context_for(StandInTI(dag_id="templated", task_id="rj")))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"entrypoint_num_cpus": -1}, "entrypoint_num_cpus"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds must be a positive integer"),
        ({"backoff_limit": "two"}, "backoff_limit must be a non-negative integer"),
    ],
)
def test_literal_rayjob_numbers_are_still_checked_when_the_dag_is_parsed(kwargs: dict, needle: str) -> None:
    with pytest.raises(RayInvalidInputError, match=needle):
        _rayjob(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"entrypoint": "  "}, "entrypoint is empty"),
        ({"entrypoint": []}, "entrypoint list is empty"),
        ({"entrypoint_num_cpus": -1}, "entrypoint_num_cpus must be a non-negative number"),
        ({"entrypoint_memory": 1.5}, "entrypoint_memory must be a non-negative integer"),
        ({"entrypoint_resources": {"TPU": -2}}, r"entrypoint_resources\['TPU'\] must be a non-negative"),
        ({"runtime_env": {"env_vars": {"N": 3}}}, r"runtime_env\['env_vars'\] must be a dict of string"),
        ({"metadata": ["a"]}, "metadata must be a dict of strings"),
    ],
)
def test_literal_job_arguments_are_checked_when_the_dag_is_parsed(kwargs: dict, needle: str) -> None:
    """They used to pass parsing and fail in ``execute``, after the cluster task had started a cluster."""
    arguments = {"entrypoint": "python x.py", **kwargs}
    with pytest.raises(RayInvalidInputError, match=needle):
        SubmitRayJobOperator(task_id="submit", ray_conn_id="ray_x", **arguments)


def test_job_arguments_from_jinja_or_upstream_are_checked_once_rendered_not_when_parsed() -> None:
    """A local working_dir is for the task's machine: not checked where the DAG is parsed."""
    from airflow.sdk import DAG, task

    with DAG("parse_time", schedule=None):

        @task
        def cpus() -> int:
            return 1

        op = SubmitRayJobOperator(
            task_id="submit",
            ray_conn_id="ray_x",
            entrypoint="{{ params.cmd }}",
            entrypoint_num_cpus=cpus(),
            entrypoint_resources="{{ params.resources }}",
            runtime_env={"working_dir": "jobs/not_here", "env_vars": {"DAY": "{{ ds }}", "N": cpus()}},
            metadata="{{ params.meta }}",
        )
    assert op.runtime_env["working_dir"] == "jobs/not_here"  # accepted: checked in execute, where it runs

"""Numbers given as Jinja templates: accepted when the DAG is parsed, numbers once rendered, or refused
naming the argument (before any job is submitted: rendering happens before ``execute``)."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay.spec import KubeRaySpecError, RayClusterSpec, validate_spec
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

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
        ({"cpus": 1, "gpus": 0, "memory": 1, "timeout": "-5"}, "job_timeout must be positive"),
    ],
)
def test_a_rendered_value_that_is_no_number_names_the_argument(params: dict, needle: str) -> None:
    op = _submit(**TEMPLATED)
    with pytest.raises(RayInvalidInputError, match=needle):
        op.render_template_fields({"params": params})


def test_literal_numbers_are_still_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(RayInvalidInputError, match="job_timeout must be positive"):
        _submit(job_timeout=0)


def test_a_rendered_replicas_count_is_an_integer() -> None:
    spec = RayClusterSpec.from_dict(
        {"worker_groups": [{"name": "cpu", "replicas": "3", "max_replicas": " 5"}]}
    )
    group = spec.worker_groups[0]
    assert (group.replicas, group.max_replicas) == (3, 5)
    with pytest.raises(KubeRaySpecError, match="replicas must be a non-negative integer"):
        validate_spec(RayClusterSpec.from_dict({"worker_groups": [{"name": "cpu", "replicas": "three"}]}))

"""The provider's errors are Airflow-free, and each is an ``AirflowException`` where it leaves a task."""

from __future__ import annotations

import pickle

import pytest
from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator

from airflow_ray_provider import get_provider_info
from airflow_ray_provider.airflow_errors import AirflowErrors, as_airflow_error
from airflow_ray_provider.exceptions import RayInvalidInputError, RayJobFailedError, RayProviderError

pytestmark = pytest.mark.unit


def _failed() -> RayJobFailedError:
    return RayJobFailedError(
        "job s-1 failed", submission_id="s-1", status="FAILED", exit_code=3, log_tail="tail"
    )


class Failing(AirflowErrors, BaseOperator):
    def execute(self, context):
        try:
            raise OSError("connection reset")
        except OSError as cause:
            raise _failed() from cause


def test_an_error_leaving_execute_is_an_airflow_exception_and_still_the_providers():
    with pytest.raises(AirflowException) as excinfo:
        Failing(task_id="failing").execute({})
    err = excinfo.value
    assert isinstance(err, RayJobFailedError) and isinstance(err, RayProviderError)
    assert type(err).__name__ == "RayJobFailedError"
    assert (err.submission_id, err.exit_code, err.log_tail, str(err)) == ("s-1", 3, "tail", "job s-1 failed")
    assert isinstance(err.__cause__, OSError) and err.__traceback__ is not None


def test_the_tree_itself_is_not_airflows_and_mapping_is_idempotent():
    err = _failed()
    assert not isinstance(err, AirflowException)
    assert as_airflow_error(as_airflow_error(err)) is err and isinstance(err, AirflowException)
    bad = as_airflow_error(RayInvalidInputError("spec.replicas: must be >= 0"))
    assert isinstance(bad, ValueError) and isinstance(bad, AirflowException)


def test_a_mapped_error_pickles_as_its_own_class_with_its_fields():
    restored = pickle.loads(pickle.dumps(as_airflow_error(_failed())))
    assert type(restored) is RayJobFailedError
    assert (restored.submission_id, restored.exit_code, str(restored)) == ("s-1", 3, "job s-1 failed")


def test_every_operator_and_sensor_of_the_provider_maps_its_errors():
    import importlib
    import inspect

    from airflow_ray_provider import decorators

    modules = [decorators] + [
        importlib.import_module(path)
        for group in ("operators", "sensors")
        for entry in get_provider_info()[group]
        for path in entry["python-modules"]
    ]
    classes = [
        cls
        for module in modules
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseOperator) and cls.__module__.startswith("airflow_ray_provider")
    ]
    assert len(classes) >= 10
    assert [c.__name__ for c in classes if not issubclass(c, AirflowErrors)] == []

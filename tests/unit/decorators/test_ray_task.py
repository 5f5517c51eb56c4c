"""Bad ``@task.ray`` input fails when the DAG is parsed, or before anything is submitted, naming the fix;
the decorator is found as ``task.ray`` through the provider's ``task-decorators`` entry."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from typing import Any

import pendulum
import pytest

from airflow_ray_provider.decorators import ray_task
from airflow_ray_provider.decorators.ray_task import (
    PACKAGE_NAME,
    call_arguments,
    dumps_call,
    remove_orphaned_stages,
    stage_package,
    task_error,
    task_value,
)
from airflow_ray_provider.exceptions import RayInvalidInputError, RayTaskError, RayTaskFunctionError
from airflow_ray_provider.workloads.function import protocol

pytestmark = pytest.mark.unit

LOCK = threading.Lock()


def test_task_ray_is_registered_as_a_taskflow_decorator():
    from airflow.sdk import task

    assert task.ray is ray_task


def _in_dag(decorated: Any, *args: Any) -> Any:
    from airflow.sdk import DAG

    with DAG("bad_input", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
        return decorated(*args)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"cluster": {"name": "x"}, "ray_conn_id": "ray_default"}, "either cluster .* or ray_conn_id"),
        ({"cluster_spec": {}, "ray_conn_id": "ray_default"}, "drop cluster and ray_conn_id"),
        ({"entrypoint": "python x.py"}, "drop entrypoint"),
        ({"wait_for_completion": False}, "drop wait_for_completion"),
        ({"result_uri": "s3://key:secret@bucket/results"}, "must not carry credentials"),
        ({"result_uri": "s3://bucket/r?secret_key=abc"}, "must not carry credentials"),
    ],
)
def test_contradicting_options_fail_at_decoration(kwargs, expected):
    with pytest.raises(RayInvalidInputError, match=expected):
        ray_task(**kwargs)


def _generator():
    yield 1


async def _coroutine():
    return 1


@pytest.mark.parametrize(
    ("function", "expected"),
    [(42, "not callable"), (_generator, "generator function"), (_coroutine, "is async")],
    ids=["non-callable", "generator", "async"],
)
def test_what_cannot_run_as_one_value_fails_at_decoration(function, expected):
    with pytest.raises(RayInvalidInputError, match=expected):
        ray_task(function)
    with pytest.raises(RayInvalidInputError, match=expected):
        ray_task(ray_conn_id="ray_default")(function)


def test_the_mode_follows_the_arguments():
    from airflow_ray_provider.decorators.ray_task import OneTaskRayTaskOperator, RayTaskOperator

    def f() -> int:
        return 1

    assert isinstance(_in_dag(ray_task(ray_conn_id="ray_default")(f)).operator, RayTaskOperator)
    assert isinstance(_in_dag(ray_task(cluster_spec={})(f)).operator, OneTaskRayTaskOperator)


def test_an_unpicklable_global_is_named():
    def uses_a_lock() -> bool:
        return LOCK.locked()

    with pytest.raises(RayInvalidInputError, match=r"uses_a_lock cannot be pickled: its global 'LOCK'"):
        dumps_call(uses_a_lock, (), {})


def test_an_unpicklable_closure_variable_inside_a_helper_is_named():
    lock = threading.Lock()

    def helper() -> bool:
        return lock.locked()

    def outer() -> bool:
        return helper()

    pattern = r"closure variable 'helper' -> closure variable 'lock' \(_thread.lock"
    with pytest.raises(RayInvalidInputError, match=pattern):
        dumps_call(outer, (), {})


def test_an_unpicklable_argument_is_named():
    def f(x: Any, *, conn: Any = None) -> None:
        return None

    with pytest.raises(RayInvalidInputError, match=r"pickled: its argument 'conn' \(_thread.lock: "):
        dumps_call(f, (1,), {"conn": threading.Lock()})


def test_closures_nested_functions_and_module_functions_pickle_by_value(tmp_path):
    from ray import cloudpickle

    factor = 3

    def nested(x: int) -> int:
        return x * factor

    def f(x: int) -> int:
        return nested(x) + len(protocol.FRAME_PREFIX)

    root = stage_package(dumps_call(f, (2,), {}), function="f", result_uri=None)
    package = root / PACKAGE_NAME
    try:
        function, args, kwargs = cloudpickle.loads((package / protocol.PAYLOAD_FILE).read_bytes())
        assert function(*args, **kwargs) == 6 + len(protocol.FRAME_PREFIX)
        assert {p.name for p in package.iterdir()} >= {"__main__.py", "protocol.py", "manifest.json"}
    finally:
        shutil.rmtree(root)
    assert not root.exists()


def test_a_staged_folder_whose_process_died_is_removed_by_the_next_staging(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    names = {
        "dead": f"arp-task-{dead.pid}@{host}-abc_1",
        "alive": f"arp-task-{os.getpid()}@{host}-abc_2",
        "other_host": f"arp-task-{dead.pid}@not-{host}-abc_3",
        "foreign": "arp-task-unrelated",
    }
    for name in names.values():
        (tmp_path / name / "airflow_ray_task").mkdir(parents=True)

    removed = remove_orphaned_stages(tmp_path)

    assert removed == [tmp_path / names["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "dead")


def test_context_values_travel_only_when_the_function_names_them():
    def f(a: int, ds: str | None = None, **rest: Any) -> None:
        return None

    context = {"ds": "2024-01-01", "ti": object()}
    assert call_arguments(f, [1], {"b": 2}, context) == ((1,), {"b": 2, "ds": "2024-01-01"})


def test_a_remote_error_carries_type_message_and_traceback():
    text = json.dumps(
        {
            "stage": "function",
            "type": "ValueError",
            "message": "bad 7",
            "traceback": "Traceback ...\n  in helper",
        }
    )
    error = task_error(protocol.Message(protocol.KIND_ERROR, text), "job-1")
    assert isinstance(error, RayTaskFunctionError)
    assert (error.remote_type, error.remote_message, error.submission_id) == ("ValueError", "bad 7", "job-1")
    assert "raised ValueError: bad 7" in str(error) and "in helper" in str(error)


def test_a_succeeded_job_without_a_result_message_is_an_error():
    with pytest.raises(RayTaskError, match=r"holds no @task\.ray result"):
        task_value(None, "job-1")

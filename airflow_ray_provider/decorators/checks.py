"""Bad ``@task.ray`` input, found when the DAG is parsed (or, for templated values, before submitting)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from airflow_ray_provider.exceptions import RayInvalidInputError

#: Arguments that make ``@task.ray`` create its own cluster for the call (cluster and job in one task).
ONE_TASK_ARGUMENTS = ("cluster_spec", "cluster_conn_id", "manifest", "local_options")
_SECRET_WORDS = ("secret", "password", "token", "key", "credential", "signature")


def check_function(function: Any) -> None:
    """Refuse what ``@task.ray`` cannot run and return as one value."""
    if not callable(function):
        raise RayInvalidInputError(
            f"@task.ray decorates a function; got {function!r} ({type(function).__name__}), which is not "
            "callable (options go in @task.ray(...) as keywords)"
        )
    name = getattr(function, "__qualname__", repr(function))
    if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
        raise RayInvalidInputError(
            f"@task.ray function {name} is a generator function: a task returns one value; return a list"
        )
    if inspect.iscoroutinefunction(function):
        raise RayInvalidInputError(
            f"@task.ray function {name} is async: define it with def (run asyncio.run(...) inside it)"
        )


def is_one_task(arguments: Mapping[str, Any]) -> bool:
    """Whether the decorator's arguments ask for a cluster of the task's own."""
    return any(name in arguments for name in ONE_TASK_ARGUMENTS)


def check_decorator_arguments(arguments: Mapping[str, Any]) -> None:
    """Refuse contradicting or meaningless ``@task.ray(...)`` options."""
    if arguments.get("cluster") is not None and arguments.get("ray_conn_id"):
        raise RayInvalidInputError(
            "@task.ray: pass either cluster (a cluster handle) or ray_conn_id, not both"
        )
    if is_one_task(arguments) and (arguments.get("cluster") is not None or arguments.get("ray_conn_id")):
        raise RayInvalidInputError(
            "@task.ray: cluster_spec / cluster_conn_id create a cluster for this task; drop cluster and "
            "ray_conn_id, or drop them to run on an existing cluster"
        )
    if "entrypoint" in arguments:
        raise RayInvalidInputError("@task.ray builds the job's entrypoint itself; drop entrypoint=")
    if arguments.get("wait_for_completion") is False:
        raise RayInvalidInputError("@task.ray waits for the function's value; drop wait_for_completion=False")
    uri = arguments.get("result_uri")
    if isinstance(uri, str) and "{{" not in uri:
        check_result_uri(uri)


def check_result_uri(uri: Any) -> str | None:
    """A ``result_uri`` is a folder path or URI without credentials (they come from the environment).

    :returns: the URI (``None`` when not set).
    """
    if uri is None:
        return None
    if not isinstance(uri, str) or not uri.strip():
        raise RayInvalidInputError(f"result_uri must be a folder path or URI (s3://, gs://), got {uri!r}")
    if "://" in uri:
        parts = urlsplit(uri)
        secret_params = [k for k, _ in parse_qsl(parts.query) if any(w in k.lower() for w in _SECRET_WORDS)]
        if parts.username or parts.password or secret_params:
            raise RayInvalidInputError(
                "result_uri must not carry credentials (it travels to the job in its manifest): give the "
                "cluster and the Airflow workers access through their environment (IAM role, env vars)"
            )
    return uri


def call_arguments(
    function: Callable[..., Any],
    op_args: Collection[Any],
    op_kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments: the task's (XComs resolved), plus context values the function names.

    Unlike ``@task``, a ``**kwargs`` parameter does not receive the whole context: only named context
    keys (``ds``, ``params``, ...) travel to the job.
    """
    args = tuple(op_args)
    kwargs = dict(op_kwargs)
    parameters = inspect.signature(function).parameters
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    filled = {p.name for p in list(parameters.values())[: len(args)] if p.kind in positional}
    for name, parameter in parameters.items():
        if name in kwargs or name in filled or parameter.kind not in (*positional, parameter.KEYWORD_ONLY):
            continue
        if name in context:
            kwargs[name] = context[name]
    return args, kwargs

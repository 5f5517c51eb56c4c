"""``@task.ray``: a Python function as a Ray job, its value the task's XCom (docs/task_ray.md). The run is
the job operators'; this module adds the function's input rules, its package (a ``py_modules`` entry) and
the value or error read back from the job's last log message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, cast
from urllib.parse import parse_qsl, urlsplit

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_ray_provider.exceptions import (
    RayInvalidInputError,
    RayJobFailedError,
    RayTaskError,
    RayTaskFunctionError,
)
from airflow_ray_provider.hooks import check_target_arguments
from airflow_ray_provider.operators import EphemeralRayJobOperator, SubmitRayJobOperator
from airflow_ray_provider.workloads.function import (
    KIND_ERROR,
    KIND_VALUE,
    MANIFEST_FILE,
    PAYLOAD_FILE,
    Message,
    ResultTransportError,
    last_message,
    read_result_file,
    runtime_versions,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import JobRun

#: Arguments that make ``@task.ray`` create its own cluster for the call (cluster and job in one task).
ONE_TASK_ARGUMENTS = ("cluster_spec", "cluster_conn_id", "manifest", "local_options", "cluster_pool")
_SECRET_WORDS = ("secret", "password", "token", "key", "credential", "signature")
#: The importable name of the uploaded package (``python -m airflow_ray_task`` in the job).
PACKAGE_NAME = "airflow_ray_task"
#: Staged folders are ``arp-task-<pid>@<host>-<random>``: a later staging removes those of dead processes.
STAGE_PREFIX = "arp-task-"
_STAGE_NAME = re.compile(rf"^{STAGE_PREFIX}(?P<pid>\d+)@(?P<host>.+)-[a-z0-9_]+$")
#: The largest pickled call sent to the cluster (Ray's package upload allows a few hundred MiB).
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
_SHIPPED = {"__main__.py": "driver.py", "protocol.py": "protocol.py"}


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
    check_target_arguments(arguments.get("cluster"), arguments.get("ray_conn_id"))
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
    """``uri``, checked: a folder path or URI without credentials (they come from the environment)."""
    if uri is not None and (not isinstance(uri, str) or not uri.strip()):
        raise RayInvalidInputError(f"result_uri must be a folder path or URI (s3://, gs://), got {uri!r}")
    parts = urlsplit(uri if uri and "://" in uri else "")
    secret_params = [k for k, _ in parse_qsl(parts.query) if any(w in k.lower() for w in _SECRET_WORDS)]
    if parts.username or parts.password or secret_params:
        raise RayInvalidInputError(
            "result_uri must not carry credentials (it travels to the job in its manifest): give the "
            "cluster and the Airflow workers access through their environment (IAM role, env vars)"
        )
    return uri


def call_arguments(
    function: Callable[..., Any], args: Collection[Any], kwargs: Mapping[str, Any], context: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments: the task's (XComs resolved), plus the context values the function names (unlike
    ``@task``, a ``**kwargs`` parameter does not receive the whole context)."""
    positional, named = tuple(args), dict(kwargs)
    for index, p in enumerate(inspect.signature(function).parameters.values()):
        free = p.kind == p.KEYWORD_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD and index >= len(positional))
        if free and p.name not in named and p.name in context:
            named[p.name] = context[p.name]
    return positional, named


def function_name(function: Callable[..., Any]) -> str:
    """``module.qualname`` of a function, for messages."""
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


@contextlib.contextmanager
def _by_value(function: Callable[..., Any], roots: Iterable[str]) -> Iterator[Any]:
    """Ray's cloudpickle with the function's module and the DAG folder's modules registered by value."""
    from ray import cloudpickle

    folders = [Path(root).resolve() for root in roots if root]
    modules: set[ModuleType | None] = {sys.modules.get(getattr(function, "__module__", "") or "")}
    for module in list(sys.modules.values()) if folders else []:
        file = getattr(module, "__file__", None)
        path = Path(file).resolve() if file else None
        if path is None or "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        if any(path.is_relative_to(folder) for folder in folders):  # the DAG folder's modules
            modules.add(module)
    already = set(cloudpickle.list_registry_pickle_by_value())
    registered = []
    for module in filter(None, modules):
        if module.__name__ not in ("__main__", "builtins", *already):
            with contextlib.suppress(ValueError, TypeError):  # not in sys.modules under that name
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
    try:
        yield cloudpickle
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def _referenced_names(code: CodeType) -> set[str]:
    nested = (_referenced_names(const) for const in code.co_consts if isinstance(const, CodeType))
    return set(code.co_names).union(*nested)


def _parts(function: Any) -> Iterator[tuple[str, Any]]:
    """What pickling a function by value pickles: its globals, closure variables and defaults."""
    if not isinstance(function, FunctionType):
        return
    code = function.__code__
    for name in sorted(_referenced_names(code)):
        if name in function.__globals__:
            yield f"global {name!r}", function.__globals__[name]
    for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            yield f"closure variable {name!r}", cell.cell_contents
    for index, default in enumerate(function.__defaults__ or ()):
        yield f"default #{index + 1}", default
    for name, default in (function.__kwdefaults__ or {}).items():
        yield f"default of {name!r}", default


def _culprit(pickler: Any, parts: Iterable[tuple[str, Any]], depth: int = 0) -> str | None:
    """The first of ``parts`` that cannot be pickled, followed into functions, e.g. ``global 'helper' ->
    closure variable 'lock' (_thread.lock: cannot pickle '_thread.lock' object)``."""
    for where, obj in parts:
        try:
            pickler.dumps(obj)
        except Exception as exc:
            inner = _culprit(pickler, _parts(obj), depth + 1) if depth < 3 else None
            kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
            return f"{where} -> {inner}" if inner else f"{where} ({kind}: {exc})"
    return None


def dumps_call(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, roots: Iterable[str] = ()
) -> bytes:
    """cloudpickle ``(function, args, kwargs)``; a failure names the function's global, closure variable,
    default or the argument that cannot be pickled (:class:`RayInvalidInputError`).

    :param roots: folders whose modules the cluster cannot import (pickled by value).
    """
    name = function_name(function)
    with _by_value(function, roots) as pickler:
        try:
            data: bytes = pickler.dumps((function, args, kwargs), protocol=5)
        except Exception as exc:
            arguments = [(f"argument #{i + 1}", value) for i, value in enumerate(args)]
            arguments += [(f"argument {key!r}", value) for key, value in kwargs.items()]
            culprit = _culprit(pickler, [*_parts(function), *arguments]) or f"{type(exc).__name__}: {exc}"
            raise RayInvalidInputError(
                f"@task.ray function {name} cannot be pickled: its {culprit}. Create such objects inside "
                "the function, or pass plain data (or a URI the function reads) as arguments"
            ) from exc
    if len(data) > MAX_PAYLOAD_BYTES:
        raise RayInvalidInputError(
            f"@task.ray function {name}: the pickled call is {len(data):,} bytes, over the "
            f"{MAX_PAYLOAD_BYTES:,}-byte limit; pass a URI of the data and read it inside the function"
        )
    return data


def stage_package(payload: bytes, *, function: str, result_uri: str | None) -> Path:
    """Write the task package (driver, protocol, pickled call, manifest) as ``PACKAGE_NAME`` in a new
    temporary folder, returned: remove it once the job is submitted (Ray's client has uploaded it)."""
    from airflow_ray_provider.workloads import function as shipped

    remove_orphaned_stages()
    root = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}@{socket.gethostname()}-"))
    package = root / PACKAGE_NAME
    package.mkdir()
    (package / "__init__.py").write_text("")
    for target, origin in _SHIPPED.items():
        shutil.copyfile(Path(shipped.__file__).parent / origin, package / target)
    (package / PAYLOAD_FILE).write_bytes(payload)
    manifest = {"function": function, "versions": runtime_versions(), "result_uri": result_uri}
    (package / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    return root


def remove_orphaned_stages(temp_dir: str | Path | None = None) -> list[Path]:
    """Remove staged folders of this host whose process is gone (a worker killed before it removed its own)
    under ``temp_dir`` (default: :func:`tempfile.gettempdir`); return them."""
    import psutil  # an Airflow requirement

    removed = []
    for path in Path(temp_dir or tempfile.gettempdir()).glob(f"{STAGE_PREFIX}*"):
        match = _STAGE_NAME.match(path.name)
        if match and match["host"] == socket.gethostname() and not psutil.pid_exists(int(match["pid"])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


_WHAT_FAILED = {
    "setup": "could not load the function",
    "result": "ran the function but could not return its value",
}


def task_error(
    message: Message, submission_id: str, *, status: str = "FAILED", log_tail: str = ""
) -> RayTaskError:
    """The error for an ``error`` message: the remote type, message and traceback, and where it failed."""
    error = message.data
    stage, kind, text = str(error.get("stage", "")), str(error.get("type", "")), str(error.get("message", ""))
    remote_tb = str(error.get("traceback", "")).rstrip()
    fields = {
        "submission_id": submission_id, "status": status, "stage": stage, "remote_type": kind,
        "remote_message": text, "remote_traceback": remote_tb, "log_tail": log_tail,
    }  # fmt: skip
    if stage == "function":
        return RayTaskFunctionError(
            f"the @task.ray function raised {kind}: {text}\n"
            f"Remote traceback (Ray job {submission_id}):\n{remote_tb}",
            **fields,
        )
    what = _WHAT_FAILED.get(stage, f"failed ({stage})")
    return RayTaskError(f"Ray job {submission_id} {what}: {kind}: {text}", **fields)


def task_value(message: Message | None, submission_id: str) -> Any:
    """The function's return value from a succeeded job's last message (else :class:`RayTaskError`)."""
    if message is None:
        raise RayTaskError(
            f"Ray job {submission_id} succeeded but its log holds no @task.ray result; was the log "
            "truncated, or the entrypoint replaced?",
            submission_id=submission_id, status="SUCCEEDED",
        )  # fmt: skip
    if message.kind == KIND_ERROR:
        raise task_error(message, submission_id, status="SUCCEEDED")
    if message.kind == KIND_VALUE:
        return message.data
    try:  # a result file (``last_message`` reads no other kind)
        return read_result_file(message.data)
    except ResultTransportError as exc:
        raise RayTaskError(f"Ray job {submission_id}: {exc}", submission_id=submission_id, status="SUCCEEDED",
                           stage="result") from exc  # fmt: skip


class _RayTaskBase(DecoratedOperator):
    """What both ``@task.ray`` operators add to their job operator: the call's package and its value.

    :param result_uri: a ``pyarrow.fs`` folder, reachable by the cluster and the Airflow worker, for values
        that are not JSON or whose JSON is over 1 MiB.
    :param python: the job driver's interpreter on the cluster (Python and cloudpickle as the worker's).
    """

    custom_operator_name = "@task.ray"
    usage_mode: ClassVar[str | None] = "task_ray"

    def __init__(self, *, result_uri: str | None = None, python: str = "python", **kwargs: Any) -> None:
        check_decorator_arguments({**kwargs, "result_uri": result_uri})
        self.result_uri = result_uri
        self.python = python
        self._staged: Path | None = None
        super().__init__(entrypoint=[python, "-m", PACKAGE_NAME], **kwargs)

    def job_submitted(self) -> None:
        """The package is uploaded (or was never needed: re-attached): its folder goes now."""
        if self._staged is not None:
            shutil.rmtree(self._staged, ignore_errors=True)
            self._staged = None

    def job(self, context: Context) -> Any:
        """The job operator's job, plus the call's package as a ``py_modules`` entry (uploaded by Ray)."""
        spec = super().job(context)  # type: ignore[misc]  # the job operator's, next in the MRO
        args, kwargs = call_arguments(self.python_callable, self.op_args, self.op_kwargs, context)
        roots = [os.path.dirname(self.dag.fileloc)] if self.has_dag() and self.dag.fileloc else []
        data = dumps_call(self.python_callable, args, kwargs, roots=roots)
        name = function_name(self.python_callable)
        self._staged = stage_package(data, function=name, result_uri=check_result_uri(self.result_uri))
        self.log.info("Pickled %s and its arguments: %d bytes", name, len(data))
        runtime_env = dict(spec.runtime_env)
        runtime_env["py_modules"] = [*runtime_env.get("py_modules", []), str(self._staged / PACKAGE_NAME)]
        return dataclasses.replace(spec, runtime_env=runtime_env)

    def result(self, run: JobRun) -> Any:
        """The function's value from the finished job; its remote error when it raised."""
        sid = run.submission_id or ""
        try:
            super().result(run)  # type: ignore[misc]  # raises for a failed or stopped job
        except RayJobFailedError as exc:
            message = last_message(run.logs())
            if message is not None and message.kind == KIND_ERROR:
                raise task_error(message, sid, log_tail=exc.log_tail) from exc
            raise
        value = task_value(last_message(run.logs()), sid)
        self.log.info("@task.ray %s returned a %s", function_name(self.python_callable), type(value).__name__)
        return value


_TEMPLATE_FIELDS = (*DecoratedOperator.template_fields, "result_uri")


class RayTaskOperator(_RayTaskBase, SubmitRayJobOperator):
    """``@task.ray(cluster=... | ray_conn_id=...)``: the function as a job on an existing cluster."""

    template_fields = (*_TEMPLATE_FIELDS, *SubmitRayJobOperator.template_fields)  # type: ignore[assignment]


class OneTaskRayTaskOperator(_RayTaskBase, EphemeralRayJobOperator):
    """``@task.ray(cluster_spec=... | cluster_conn_id=...)``: a cluster of its own, deleted in the task."""

    template_fields = (*_TEMPLATE_FIELDS, *EphemeralRayJobOperator.template_fields)  # type: ignore[assignment]


def ray_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Run the decorated function as a Ray job; its return value is the task's XCom (docs/task_ray.md).

    ``cluster=`` or ``ray_conn_id=`` (default ``ray_default``) run it on that cluster, ``cluster_spec=`` /
    ``cluster_conn_id=`` on one of its own; other keywords go to the job operator (and ``result_uri``,
    ``python``: :class:`_RayTaskBase`). ``multiple_outputs`` pushes each key of a returned dict.
    """
    check_decorator_arguments(kwargs)
    factory = task_decorator_factory(
        multiple_outputs=multiple_outputs,
        decorated_operator_class=OneTaskRayTaskOperator if is_one_task(kwargs) else RayTaskOperator,
        **kwargs,
    )

    def decorate(function: Callable[..., Any]) -> Any:
        check_function(function)
        return cast("Callable[[Callable[..., Any]], Any]", factory)(function)

    return cast("TaskDecorator", decorate if python_callable is None else decorate(python_callable))

"""Pack a ``@task.ray`` call for its Ray job: cloudpickle it, name what cannot be pickled, stage the package.

The package goes to the cluster as a ``py_modules`` entry that Ray's Job API client uploads. Modules
from the DAG file's folder are pickled *by value* (the cluster cannot import them); installed libraries
go by reference and must exist on the cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.workloads.function import MANIFEST_FILE, PAYLOAD_FILE, runtime_versions

#: The importable name of the uploaded package (``python -m airflow_ray_task`` in the job).
PACKAGE_NAME = "airflow_ray_task"
#: Staged folders are ``arp-task-<pid>@<host>-<random>``: a later staging removes those of dead processes.
STAGE_PREFIX = "arp-task-"
_STAGE_NAME = re.compile(rf"^{STAGE_PREFIX}(?P<pid>\d+)@(?P<host>.+)-[a-z0-9_]+$")
#: The largest pickled call sent to the cluster (Ray's package upload allows a few hundred MiB).
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
_SHIPPED = {"__main__.py": "driver.py", "protocol.py": "protocol.py"}


def function_name(function: Callable[..., Any]) -> str:
    """``module.qualname`` of a function, for messages."""
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


@contextmanager
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

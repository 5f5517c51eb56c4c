"""Artifact I/O through ``pyarrow.fs`` (local paths, ``file://``, ``s3://``, ``gs://``) with atomic writes.

Atomicity: on a local file system a file is written under a temporary name beside its target and
renamed into place (``rename`` is atomic on POSIX). Object stores (S3, GCS) make an object visible
only once its upload completes, so a reader never sees half an object there either. Multi-file
artifacts additionally get a ``_SUCCESS`` marker written last; readers check it first.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import uuid
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common.errors import ArtifactError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

SUCCESS_MARKER = "_SUCCESS"


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the file system and the path inside it for ``uri``.

    :param uri: a local path, ``file://``, ``s3://`` or ``gs://`` URI.
    :raises ArtifactError: when the scheme is unsupported.
    """
    import pyarrow.fs as pafs

    if "://" not in uri:
        import os

        return pafs.LocalFileSystem(), os.path.abspath(uri)
    try:
        return pafs.FileSystem.from_uri(uri)
    except pa_errors(ValueError) as exc:
        raise ArtifactError(f"cannot open {uri!r}: {exc}. Use a local path, file://, s3:// or gs://") from exc


def pa_errors(*extra: type[Exception]) -> tuple[type[Exception], ...]:
    """The exception types pyarrow raises for file-system problems, plus ``extra``: for ``except``.

    :param extra: more exception types to catch along with them.
    """
    import pyarrow as pa

    return (pa.ArrowException, OSError, *extra)


def join(base_uri: str, *names: str) -> str:
    """Join path segments onto a URI or path, keeping its scheme."""
    if "://" in base_uri:
        scheme, rest = base_uri.split("://", 1)
        return f"{scheme}://{posixpath.join(rest, *names)}"
    return posixpath.join(base_uri, *names)


def is_local(fs: pafs.FileSystem) -> bool:
    """Whether ``fs`` is the local file system (where rename-into-place is needed)."""
    import pyarrow.fs as pafs

    return isinstance(fs, pafs.LocalFileSystem)


def write_bytes_atomic(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri`` so that a reader sees either nothing or the whole file."""
    fs, path = resolve(uri)
    parent = posixpath.dirname(path)
    try:
        if parent:
            fs.create_dir(parent, recursive=True)
        if not is_local(fs):
            with fs.open_output_stream(path) as out:
                out.write(data)
            return
        tmp = posixpath.join(parent, f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with fs.open_output_stream(tmp) as out:
                out.write(data)
            fs.move(tmp, path)
        finally:
            if fs.get_file_info(tmp).type.name != "NotFound":
                fs.delete_file(tmp)
    except pa_errors() as exc:
        raise ArtifactError(f"could not write {uri!r}: {exc}") from exc


def probe_writable(dir_uri: str) -> None:
    """Write and delete a probe file in ``dir_uri``; folders made for it are removed again.

    Run before any work, so a folder nobody can write fails in a second instead of after the run.

    :raises ArtifactError: when the probe cannot be written (the message names the URI and the reason).
    """
    fs, path = resolve(dir_uri)
    missing, folder = [], path
    while folder and fs.get_file_info(folder).type.name == "NotFound" and folder != posixpath.dirname(folder):
        missing.append(folder)
        folder = posixpath.dirname(folder)
    probe = posixpath.join(path, f".write-probe-{uuid.uuid4().hex}")
    try:
        if is_local(fs):  # an object store needs no folder (and would keep a folder marker)
            fs.create_dir(path, recursive=True)
        with fs.open_output_stream(probe) as out:
            out.write(b"")
        fs.delete_file(probe)
    except pa_errors() as exc:
        raise ArtifactError(
            f"{dir_uri!r} is not writable ({exc}): fix its permissions or choose another"
        ) from exc
    finally:
        for made in missing if is_local(fs) else ():  # deepest first; object stores have no folders
            with contextlib.suppress(*pa_errors()):
                fs.delete_dir(made)


def write_json_atomic(uri: str, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    write_bytes_atomic(uri, json.dumps(obj, indent=2, sort_keys=False, default=str).encode())


def write_parquet_atomic(uri: str, table: pa.Table) -> None:
    """Write an Arrow table as Parquet, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_bytes_atomic(uri, sink.getvalue().to_pybytes())


def read_bytes(uri: str) -> bytes:
    """Read a whole file.

    :raises ArtifactError: when it does not exist or cannot be read.
    """
    fs, path = resolve(uri)
    try:
        with fs.open_input_stream(path) as src:
            return src.read()
    except FileNotFoundError as exc:
        raise ArtifactError(f"{uri!r} does not exist") from exc
    except pa_errors() as exc:
        raise ArtifactError(f"could not read {uri!r}: {exc}") from exc


def read_json(uri: str) -> Any:
    """Read and parse a JSON file.

    :raises ArtifactError: when it is missing or not valid JSON.
    """
    raw = read_bytes(uri)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ArtifactError(f"{uri!r} is not valid JSON (truncated or corrupt?): {exc}") from exc


def exists(uri: str) -> bool:
    """Whether a file or directory exists at ``uri``."""
    fs, path = resolve(uri)
    return fs.get_file_info(path).type.name != "NotFound"


def mark_complete(dir_uri: str) -> None:
    """Write the ``_SUCCESS`` marker into ``dir_uri`` (do this after every other file)."""
    write_bytes_atomic(join(dir_uri, SUCCESS_MARKER), b"")


def clear_completion(dir_uri: str) -> None:
    """Remove a stale ``_SUCCESS`` marker before rewriting an artifact directory."""
    fs, path = resolve(join(dir_uri, SUCCESS_MARKER))
    if fs.get_file_info(path).type.name != "NotFound":
        fs.delete_file(path)


def is_complete(dir_uri: str) -> bool:
    """Whether ``dir_uri`` holds a complete artifact (its ``_SUCCESS`` marker exists)."""
    return exists(join(dir_uri, SUCCESS_MARKER))

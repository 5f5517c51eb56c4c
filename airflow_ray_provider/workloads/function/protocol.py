"""What ``@task.ray`` and its driver inside the Ray job agree on: the manifest, result frames, result files.

The Airflow side and the job share no file system, so everything travels over the Ray Job API:

* **to the job**: a Python package (this module, the driver as ``__main__``, ``payload.pkl`` and
  ``manifest.json``) uploaded as a ``py_modules`` entry of the job's runtime env (Ray's package upload);
* **back**: *frames*, lines of the job's driver log that start with :data:`FRAME_PREFIX`, read through
  the Job API's logs endpoint. A frame carries a chunk of JSON text; the chunks of one message share a
  kind, a count and a checksum, so a reader takes the last complete message and ignores anything else.
  A value that is not JSON, or whose JSON exceeds the inline limit, goes to a ``pyarrow.fs`` URI the
  user configured (``result_uri``) and the frame carries only its location and checksum.

This module is shipped to clusters that may not have the provider installed, so it imports only the
standard library (``pyarrow`` and ``ray`` lazily) and nothing of the provider.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import sys
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FORMAT_VERSION",
    "FRAME_PREFIX",
    "INLINE_RESULT_LIMIT",
    "KIND_ERROR",
    "KIND_URI",
    "KIND_VALUE",
    "MANIFEST_FILE",
    "PAYLOAD_FILE",
    "Message",
    "ResultTransportError",
    "encode_message",
    "encode_value",
    "interpreter_mismatch",
    "last_message",
    "read_result_file",
    "runtime_versions",
    "write_result_file",
]

FORMAT_VERSION = 1
FRAME_PREFIX = "@@airflow-ray-task v1"
#: The largest return value (as JSON text) that travels in the job log; larger ones need ``result_uri``.
INLINE_RESULT_LIMIT = 1024 * 1024
#: Characters of JSON per log line.
CHUNK_CHARS = 16 * 1024
MANIFEST_FILE = "manifest.json"
PAYLOAD_FILE = "payload.pkl"
RESULT_FILE = "return_value.pkl"

KIND_VALUE = "value"  # the return value's JSON
KIND_URI = "uri"  # {"uri", "bytes", "sha256"} of the pickled return value
KIND_ERROR = "error"  # {"stage", "type", "message", "traceback"}
_KINDS = (KIND_VALUE, KIND_URI, KIND_ERROR)


class ResultTransportError(Exception):
    """The return value cannot travel back: not JSON or over the inline limit, and no ``result_uri``."""


@dataclass(frozen=True)
class Message:
    """One decoded message of the job log: its kind and its JSON text."""

    kind: str
    text: str

    @property
    def data(self) -> Any:
        """The message's JSON, decoded."""
        return json.loads(self.text)


def _digest(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def encode_message(kind: str, text: str) -> list[str]:
    """The log lines (frames) of one message; each fits a log line and the set checks itself."""
    if kind not in _KINDS:
        raise ValueError(f"unknown frame kind {kind!r}")
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
    digest = _digest(text)[:16]
    return [f"{FRAME_PREFIX} {kind} {n}/{len(chunks)} {digest} {chunk}" for n, chunk in enumerate(chunks, 1)]


def last_message(log_text: str) -> Message | None:
    """The last complete, intact message in a job log (``None`` when there is none)."""
    found: Message | None = None
    parts: list[str] = []
    current: tuple[str, int, str] | None = None
    for line in log_text.splitlines():
        if not line.startswith(FRAME_PREFIX + " "):
            continue
        fields = line[len(FRAME_PREFIX) + 1 :].split(" ", 3)
        if len(fields) < 3 or fields[0] not in _KINDS or "/" not in fields[1]:
            continue
        kind, position, digest = fields[0], fields[1], fields[2]
        chunk = fields[3] if len(fields) == 4 else ""
        index, _, count = position.partition("/")
        if not (index.isdigit() and count.isdigit()):
            continue
        if int(index) == 1:
            current, parts = (kind, int(count), digest), []
        if current is None or (kind, int(count), digest) != current or int(index) != len(parts) + 1:
            current, parts = None, []
            continue
        parts.append(chunk)
        if len(parts) == current[1]:
            text = "".join(parts)
            if _digest(text)[:16] == digest:
                found = Message(kind, text)
            current, parts = None, []
    return found


def encode_value(
    value: Any, *, result_uri: str | None, name: str, limit: int = INLINE_RESULT_LIMIT
) -> list[str]:
    """The frames that return ``value``: its JSON inline, or (non-JSON or too large) a file at ``result_uri``.

    :param value: what the function returned.
    :param result_uri: a ``pyarrow.fs`` folder URI (local path, ``s3://``, ``gs://``), or ``None``.
    :param name: the file's folder under ``result_uri`` (the job's submission id: unique per attempt).
    :param limit: the largest JSON text (in bytes) that travels in the job log.
    :raises ResultTransportError: the value cannot travel and no ``result_uri`` is configured.
    """
    try:
        text: str | None = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = None
    if text is not None and len(text) <= limit:
        return encode_message(KIND_VALUE, text)
    if not result_uri:
        kind = type(value)
        what = (
            f"is {len(text):,} bytes as JSON"
            if text is not None
            else f"({kind.__module__}.{kind.__qualname__}) is not JSON-serialisable"
        )
        raise ResultTransportError(
            f"the return value {what}, and the job log carries only JSON of at most {limit:,} bytes "
            f"({limit / 2**20:g} MiB); set result_uri= (a pyarrow.fs folder: a local path, s3://, gs://) "
            "on @task.ray to return it through storage, or return something smaller"
        )
    location = write_result_file(value, result_uri=result_uri, name=name)
    return encode_message(KIND_URI, json.dumps(location))


def join_uri(base: str, *names: str) -> str:
    """Join path segments onto a URI or path, keeping its scheme."""
    if "://" in base:
        scheme, rest = base.split("://", 1)
        return f"{scheme}://{posixpath.join(rest, *names)}"
    return posixpath.join(base, *names)


def _filesystem(uri: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return pafs.FileSystem.from_uri(uri)


def write_result_file(value: Any, *, result_uri: str, name: str) -> dict[str, Any]:
    """Pickle ``value`` (Ray's cloudpickle) to ``<result_uri>/<name>/return_value.pkl``, atomically.

    Written under a temporary name and moved into place, so a reader never sees half a file.

    :returns: ``{"uri", "bytes", "sha256"}`` for the frame.
    """
    from ray import cloudpickle

    data = cloudpickle.dumps(value, protocol=5)
    uri = join_uri(result_uri, name, RESULT_FILE)
    fs, path = _filesystem(uri)
    fs.create_dir(posixpath.dirname(path), recursive=True)
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(temporary) as stream:
        stream.write(data)
    fs.move(temporary, path)
    return {"uri": uri, "bytes": len(data), "sha256": _digest(data)}


def read_result_file(location: dict[str, Any]) -> Any:
    """Read back what :func:`write_result_file` wrote, checking its size and checksum.

    :raises ResultTransportError: the file is missing, incomplete or changed.
    """
    from ray import cloudpickle

    uri = str(location["uri"])
    fs, path = _filesystem(uri)
    try:
        with fs.open_input_stream(path) as stream:
            data = stream.read()
    except (OSError, ValueError) as exc:
        raise ResultTransportError(f"cannot read the return value at {uri}: {exc}") from exc
    if len(data) != location.get("bytes") or _digest(data) != location.get("sha256"):
        raise ResultTransportError(f"the return value at {uri} is incomplete or was changed after the job")
    return cloudpickle.loads(data)


def runtime_versions() -> dict[str, str]:
    """This interpreter's Python ``major.minor`` and Ray's cloudpickle version (what a pickle needs)."""
    from ray import cloudpickle

    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return {"python": python, "cloudpickle": str(cloudpickle.__version__)}


def interpreter_mismatch(pickled_by: dict[str, str], running: dict[str, str]) -> str | None:
    """Why a payload pickled by ``pickled_by`` cannot be loaded by ``running`` (``None`` when it can).

    cloudpickle guarantees compatibility only for the same Python minor version and cloudpickle version.
    """
    differs = [key for key in ("python", "cloudpickle") if pickled_by.get(key) != running.get(key)]
    if not differs:
        return None
    return (
        f"the function was pickled by Python {pickled_by.get('python')} with cloudpickle "
        f"{pickled_by.get('cloudpickle')} (Airflow side), but this Ray job runs Python "
        f"{running.get('python')} with cloudpickle {running.get('cloudpickle')} ({sys.executable}); "
        "they must match: use a Ray image (or python=) with the same Python minor version and Ray version "
        "as the Airflow worker"
    )

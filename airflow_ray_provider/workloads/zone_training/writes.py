"""Atomic model writes for one training task, cheap enough to do once per zone.

:func:`artifacts.write_bytes_atomic` resolves the URI, creates the parent directory and checks for a
leftover temporary file on every call; for a model that takes about a millisecond to fit that is a
noticeable share of the task. A :class:`ModelWriter` resolves the models directory once per task.
On the local file system it creates the directory once and then writes each model with plain ``os``
calls: a uniquely named temporary file beside the target, renamed into place (atomic on POSIX; the
temporary file is removed on failure). Remote URIs (``s3://``, ``gs://``) go through ``pyarrow.fs``,
where an object becomes visible only once its upload completes.

For 1,000 Ridge zones the file creation itself (inode, directory entry) is most of the cost and every
variant pays it; what this saves is the per-call resolve, ``create_dir`` and ``get_file_info`` round
trips.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError


class ModelWriter:
    """Writes files under one directory URI, atomically.

    :param base_uri: the directory (local path, ``file://``, ``s3://`` or ``gs://``).
    """

    def __init__(self, base_uri: str) -> None:
        self._base_uri = base_uri
        self._dir: str | None = None  # resolved on first write (a bad URI fails that zone, not the task)
        self._local = False

    def write(self, name: str, data: bytes) -> str:
        """Write ``data`` to ``<base_uri>/<name>`` (a reader sees nothing or the whole file); return its URI.

        :raises ArtifactError: when the file cannot be written.
        """
        uri = artifacts.join(self._base_uri, name)
        if self._dir is None:
            fs, path = artifacts.resolve(self._base_uri)
            self._local = artifacts.is_local(fs)
            if self._local:
                try:
                    os.makedirs(path, exist_ok=True)
                except OSError as exc:
                    raise ArtifactError(f"could not create {self._base_uri!r}: {exc}") from exc
            self._dir = path
        if not self._local:
            artifacts.write_bytes_atomic(uri, data)
            return uri
        try:
            _write_local(posixpath.join(self._dir, name), data)
        except OSError as exc:
            raise ArtifactError(f"could not write {uri!r}: {exc}") from exc
        return uri


def _write_local(path: str, data: bytes) -> None:
    parent, base = posixpath.split(path)
    tmp = posixpath.join(parent, f".{base}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

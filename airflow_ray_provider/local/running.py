"""A started local head: what it takes to reach and stop it, whether it still runs, and stopping it.

:func:`stop_head` works from any process, given the head's :class:`LocalHeadInfo`: it signals only the
processes of the session the head leads and the job drivers it started, after checking that they still
belong to this head (a reused process id does not).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LocalHeadInfo:
    """What it takes to reach and to stop a running local head (JSON-serialisable, no secrets).

    :param agent_url: the head's job agent; ``None`` when not recorded (then it is not waited on).
    """

    name: str
    pid: int
    pgid: int
    temp_dir: str
    dashboard_url: str
    gcs_address: str
    token_file: str | None
    agent_url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The info as a plain dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalHeadInfo:
        """Rebuild the info from :meth:`to_dict` output (unknown keys are ignored)."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _processes() -> Iterator[tuple[int, str, int, int]]:
    """Every process on the machine as ``(pid, state, process group, session)``, from ``/proc``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                state, _, group, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
                yield int(entry.name), state, int(group), int(session)


def _proc_file(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _cmdline(pid: int) -> str:
    return _proc_file(pid, "cmdline").decode(errors="replace")


def is_running(info: LocalHeadInfo) -> bool:
    """Whether a live process of the head's process group runs in its temp dir (a reused pgid does not)."""
    group = [pid for pid, state, pgid, _ in _processes() if pgid == info.pgid and state != "Z"]
    return any(info.temp_dir in _cmdline(pid) for pid in group)


def _head_processes(info: LocalHeadInfo) -> list[int]:
    """The head's live processes (zombies left out), wherever Ray moved them.

    ``ray start`` leads a session of its own, and Ray moves each worker into a process group of its own
    inside it: the head's process group alone misses a worker that was starting when the head was
    stopped, which would live on and re-create the session's folders in the removed temp dir. Job
    drivers, and Ray's watcher of each, run in sessions of their own but carry the head's ``RAY_TMPDIR``
    (:func:`head_environment`). Members of the session count only while one of them runs in the head's
    temp dir (a reused pid does not); the calling process never counts.
    """
    marker = f"RAY_TMPDIR={info.temp_dir}".encode()
    in_session: list[int] = []
    by_environment: list[int] = []
    for pid, state, group, session in _processes():
        if state == "Z" or pid == os.getpid():
            continue
        if info.pgid in (group, session):
            in_session.append(pid)
        elif marker in _proc_file(pid, "environ").split(b"\0"):
            by_environment.append(pid)
    if not any(info.temp_dir in _cmdline(pid) for pid in in_session):
        in_session = []
    return in_session + by_environment


def stop_head(info: LocalHeadInfo, *, grace: float = 1.0) -> bool:
    """Stop a local head and remove its temp dir; ``False`` when it was already gone. Safe to call twice.

    Every process of the head (:func:`_head_processes`) gets SIGTERM, whatever is left after ``grace``
    seconds SIGKILL (``raylet`` and the autoscaler monitor often outlive SIGTERM by seconds; nothing of an
    ephemeral head outlives it), and the temp dir goes only once none is left, so nothing writes into it.
    """
    was_running = is_running(info)
    left = _head_processes(info)
    for signum, seconds in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        signalled: set[int] = set()
        deadline = time.monotonic() + seconds
        while left and time.monotonic() < deadline:
            for pid in set(left) - signalled:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
            signalled.update(left)
            time.sleep(0.1)
            _reap(info.pid)
            left = _head_processes(info)
    _reap(info.pid)
    shutil.rmtree(info.temp_dir, ignore_errors=True)
    return was_running


def _reap(pid: int) -> None:
    """Collect the exit status of our own child, if it is one (no-op from other processes)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)

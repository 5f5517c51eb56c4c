"""The local backend's client layer: one ephemeral Ray head on this machine, ``ray start --head`` in its
own session and temp dir, up once its node has started and its dashboard and job agent answer.
:func:`stop_head` stops it from any process, signalling only processes that still belong to it (a reused
process id does not). No Airflow imports; the registry by name is :mod:`airflow_ray_provider.clusters.local`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "LocalClusterOptions",
    "LocalHeadConfig",
    "LocalHeadError",
    "LocalHeadInfo",
    "StartupCrashError",
    "is_running",
    "read_token",
    "start_head",
    "stop_head",
    "wait_for_head",
    "waiting_for",
]

TOKEN_FILE_NAME = "auth_token"
HEAD_LOG_NAME = "ray-start.log"
#: What ``ray start`` logs once its node has registered with the GCS; the dashboard answers earlier, and
#: the head can still die in between (the raylet gives the agent 15 s to publish its port).
STARTED_MARKER = "Ray runtime started."
#: The job agent answers this once up; before, the Job API refuses jobs ("No available agent"). KubeRay's
#: default head readiness probe asks it too.
AGENT_HEALTH_PATH = "/api/local_raylet_healthz"
#: What the agent logs when its port was taken before it bound it: it lives on but can never run a job.
AGENT_HTTP_FAILED_MARKER = "Failed to start HTTP server"
AGENT_LOG = os.path.join("session_latest", "logs", "dashboard_agent.log")
#: Starts of a head whose ``ray start`` gave up during startup (a starved machine).
START_ATTEMPTS = 3
#: Command groups Ray's CLI imports when loaded (pandas, FastAPI), each as optional; ``ray start`` uses none.
RAY_CLI_OPTIONAL_GROUPS = ("ray.serve.scripts", "ray.util.state.state_cli", "ray.dashboard.modules.job.cli")
#: The head's first process. It waits for a ``1`` on stdin, sent once the head is registered, so a start
#: interrupted before then runs no Ray: on end of input it removes its temp dir and exits. Then it is
#: Ray's own ``ray`` CLI, told that Ray Client is not installed (Ray's rule for starting no Ray Client
#: server, which would take port 10001 and so fail a second head on the machine).
_LAUNCHER = (
    "import os, shutil, sys\n"
    "if sys.stdin.read(1) != '1':\n"
    "    shutil.rmtree(os.environ['RAY_TMPDIR'], ignore_errors=True)\n"
    "    sys.exit(3)\n"
    f"sys.modules.update(dict.fromkeys({RAY_CLI_OPTIONAL_GROUPS!r}))\n"
    "import ray.scripts.scripts as cli\n"
    "cli.get_ray_client_dependency_error = lambda: 'a local head runs no Ray Client server'\n"
    "sys.exit(cli.main())\n"
)

log = logging.getLogger(__name__)


class LocalHeadError(RuntimeError):
    """The local Ray head could not be started or stopped."""


class StartupCrashError(LocalHeadError):
    """``ray start`` exited, or its job agent could not serve, before the head was up (worth one more try)."""


@dataclass(frozen=True)
class LocalClusterOptions:
    """What a local head offers (``None``: every core, the GPUs Ray detects, Ray's object store) and how
    long it may take to come up; ``env`` reaches every process it starts; keep ``temp_root`` short (Unix
    socket paths <= ~107 chars)."""

    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_memory: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    temp_root: str | None = None
    ready_timeout: float = 120.0

    @classmethod
    def from_value(cls, value: LocalClusterOptions | dict[str, Any] | None) -> LocalClusterOptions:
        """Accept options, a dict of them, or ``None``; unknown keys raise ``ValueError``."""
        if isinstance(value, LocalClusterOptions):
            return value
        known = sorted(cls.__dataclass_fields__)
        unknown = sorted(set(value or {}) - set(known))
        if unknown:
            raise ValueError(f"local options has unknown key(s) {unknown}; known: {known}")
        return cls(**(value or {}))


@dataclass(frozen=True)
class LocalHeadConfig(LocalClusterOptions):
    """One local head's options and auth: token auth on (``token``: this one, else a fresh one)."""

    auth: bool = True
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class LocalHeadInfo:
    """What it takes to reach and stop a running head (no secrets); ``agent_url`` ``None``: not recorded,
    not waited on."""

    name: str
    pid: int
    pgid: int
    temp_dir: str
    dashboard_url: str
    gcs_address: str
    token_file: str | None
    agent_url: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalHeadInfo:
        """The info from its ``asdict`` (unknown keys, e.g. a handle's ``expires_at``, are ignored)."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _processes() -> Iterator[tuple[int, str, int, int]]:
    """Every process on the machine as ``(pid, state, process group, session)``, from ``/proc``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                state, _, group, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
                yield int(entry.name), state, int(group), int(session)


def _read(path: str | Path) -> str:
    """A file's text, ``""`` when it cannot be read (a process or a log that is gone)."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline")


def is_running(info: LocalHeadInfo) -> bool:
    """Whether a live process of the head's process group runs in its temp dir (a reused pgid does not)."""
    group = [pid for pid, state, pgid, _ in _processes() if pgid == info.pgid and state != "Z"]
    return any(info.temp_dir in _cmdline(pid) for pid in group)


def _head_processes(info: LocalHeadInfo) -> list[int]:
    """The head's live processes: its session (Ray moves each worker into a process group of its own; a
    worker missed would re-create folders in the removed temp dir) while one of them runs in its temp dir,
    and the job drivers that carry its ``RAY_TMPDIR``; never the calling process."""
    marker = f"RAY_TMPDIR={info.temp_dir}"
    in_session: list[int] = []
    by_environment: list[int] = []
    for pid, state, group, session in _processes():
        if state == "Z" or pid == os.getpid():
            continue
        if info.pgid in (group, session):
            in_session.append(pid)
        elif marker in _read(f"/proc/{pid}/environ").split("\0"):
            by_environment.append(pid)
    if not any(info.temp_dir in _cmdline(pid) for pid in in_session):
        in_session = []
    return in_session + by_environment


def stop_head(info: LocalHeadInfo, *, grace: float = 1.0) -> bool:
    """Stop a head and then remove its temp dir (``False``: already gone; safe twice): SIGTERM, then SIGKILL
    after ``grace`` s (``raylet`` often outlives SIGTERM by seconds)."""
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


def free_port() -> int:
    """Ask the kernel for a free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_token(token_file: str | None) -> str | None:
    """Read a token file written by :func:`start_head` (``None``: no file, auth off)."""
    return Path(token_file).read_text().strip() if token_file else None


def _head_command(config: LocalHeadConfig, temp_dir: str, ports: tuple[int, int, int]) -> list[str]:
    gcs_port, dash_port, agent_port = ports
    cmd = [  # unbuffered: STARTED_MARKER reaches the log at once
        sys.executable, "-u", "-c", _LAUNCHER, "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1", f"--port={gcs_port}",
        "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}",
        f"--temp-dir={temp_dir}", f"--dashboard-agent-listen-port={agent_port}",
        f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]  # fmt: skip
    options = {"num-cpus": config.num_cpus, "num-gpus": config.num_gpus,
               "object-store-memory": config.object_store_memory,
               "resources": json.dumps(config.resources) if config.resources else None}  # fmt: skip
    return cmd + [f"--{flag}={value}" for flag, value in options.items() if value is not None]


def _answers(url: str, token: str | None = None, timeout: float = 2.0) -> bool:
    """Whether ``url`` answers HTTP 200 (with the token, when given)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_head(
    config: LocalHeadConfig | None = None,
    *,
    name: str | None = None,
    on_spawn: Callable[[LocalHeadInfo], None] | None = None,
) -> LocalHeadInfo:
    """Start a head and wait until it is up (else it is stopped: :class:`LocalHeadError`); one whose start
    crashed is started again on fresh ports, up to :data:`START_ATTEMPTS` times. ``on_spawn`` runs once its
    process exists, before Ray starts in it (e.g. to register it); if it raises, the head is stopped."""
    config = config or LocalHeadConfig()
    for attempt in range(1, START_ATTEMPTS):
        try:
            return _start_once(config, name, on_spawn)
        except StartupCrashError as exc:
            log.warning(
                "The local Ray head failed during startup (attempt %d of %d); starting it again. %s",
                attempt, START_ATTEMPTS, exc,
            )  # fmt: skip
    return _start_once(config, name, on_spawn)


def head_environment(config: LocalHeadConfig, temp_dir: str) -> dict[str, str]:
    """The environment of the head and every process it starts: ``PATH`` first has ``python`` and
    ``python3`` that run this interpreter (a job's plain ``python`` has Ray and this provider), ``TMPDIR``
    the head's temp dir (what its processes leave goes with it); ``config.env`` overrides both."""
    shim = os.path.join(temp_dir, "bin")
    os.makedirs(shim, exist_ok=True)
    for name in ("python", "python3"):
        Path(shim, name).write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        os.chmod(os.path.join(shim, name), 0o755)
    inherited = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p]
    path = os.pathsep.join([shim, os.path.dirname(sys.executable), *inherited])
    return {
        **os.environ, "PATH": path, "TMPDIR": temp_dir,
        **config.env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": temp_dir,
    }  # fmt: skip


def _start_once(
    config: LocalHeadConfig, name: str | None, on_spawn: Callable[[LocalHeadInfo], None] | None
) -> LocalHeadInfo:
    temp_root = config.temp_root or os.environ.get("RAY_TMPDIR_ROOT") or "/tmp"
    temp_dir = tempfile.mkdtemp(prefix="rayh-", dir=temp_root)
    gate, go_ahead = os.pipe()  # the launcher's stdin: Ray starts once a "1" comes, never after end of input
    info = None
    try:
        ports = (free_port(), free_port(), free_port())
        env, token_file = head_environment(config, temp_dir), None
        env.pop("RAY_AUTH_TOKEN", None)
        env["RAY_AUTH_MODE"] = "disabled"
        if config.auth:  # the token file is 0600
            token = config.token or secrets.token_hex(32)
            token_file = os.path.join(temp_dir, TOKEN_FILE_NAME)
            with os.fdopen(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                out.write(token)
            env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
        with open(os.path.join(temp_dir, HEAD_LOG_NAME), "wb") as head_log:
            proc = subprocess.Popen(
                _head_command(config, temp_dir, ports), stdin=gate, stdout=head_log,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        info = LocalHeadInfo(
            name=name or Path(temp_dir).name, pid=proc.pid, pgid=proc.pid, temp_dir=temp_dir,
            dashboard_url=f"http://127.0.0.1:{ports[1]}", gcs_address=f"127.0.0.1:{ports[0]}",
            token_file=token_file, agent_url=f"http://127.0.0.1:{ports[2]}",
        )  # fmt: skip
        if on_spawn is not None:
            on_spawn(info)
        os.write(go_ahead, b"1")
    except BaseException as exc:
        if info is not None:
            stop_head(info)
        shutil.rmtree(temp_dir, ignore_errors=True)
        if isinstance(exc, OSError) and info is None:
            raise LocalHeadError(f"could not start `ray start --head`: {exc}") from exc
        raise
    finally:
        os.close(go_ahead)  # a launcher still waiting (its starter interrupted) sees end of input
        os.close(gate)
    _wait_until_up(proc.poll, info, config.ready_timeout)
    return info


def wait_for_head(info: LocalHeadInfo, timeout: float) -> None:
    """Wait for a head another process started; one that exits or is late is stopped (LocalHeadError)."""
    _wait_until_up(lambda: None if is_running(info) else -1, info, timeout)


def _wait_until_up(exit_code: Callable[[], int | None], info: LocalHeadInfo, timeout: float) -> None:
    """Return once the head is up (:func:`waiting_for`); else stop the head and raise."""
    start = time.monotonic()
    waiting = ["its process"]
    while time.monotonic() < start + timeout:
        code = exit_code()
        if code is not None:
            _fail(info, StartupCrashError, f"`ray start --head` exited with {code}", HEAD_LOG_NAME)
        if AGENT_HTTP_FAILED_MARKER in _read(Path(info.temp_dir, AGENT_LOG)):
            message = "the head's dashboard agent could not start its HTTP server"
            _fail(info, StartupCrashError, message, AGENT_LOG)
        try:
            waiting = waiting_for(info)
        except http.client.HTTPException:  # a port it was given went to another process before Ray bound it
            _fail(info, StartupCrashError, "a port of the head answers, but not in HTTP", HEAD_LOG_NAME)
        if not waiting:
            log.info("local Ray head %s up after %.1fs", info.name, time.monotonic() - start)
            return
        time.sleep(0.25)
    message = f"local Ray head was not up within {timeout:.0f}s: still waiting for {', '.join(waiting)}"
    _fail(info, LocalHeadError, f"{message} (dashboard {info.dashboard_url}); last log lines", HEAD_LOG_NAME)


def waiting_for(info: LocalHeadInfo) -> list[str]:
    """What the head still waits for to be up: its node started, its dashboard (with its token) and its job
    agent answering; ``[]``: up."""
    token = _read(info.token_file).strip() if info.token_file else None  # "": its file is gone
    checks = {
        "node started": lambda: STARTED_MARKER in _read(Path(info.temp_dir, HEAD_LOG_NAME)),
        "dashboard /api/version": lambda: _answers(f"{info.dashboard_url}/api/version", token),
        f"job agent {AGENT_HEALTH_PATH}": lambda: agent_answers(info),
    }
    return [part for part, is_up in checks.items() if not is_up()]


def agent_answers(info: LocalHeadInfo) -> bool:
    """Whether the head's job agent answers :data:`AGENT_HEALTH_PATH` (``True`` when not recorded)."""
    return info.agent_url is None or _answers(f"{info.agent_url}{AGENT_HEALTH_PATH}")


def _fail(info: LocalHeadInfo, error: type[LocalHeadError], message: str, log_name: str) -> NoReturn:
    """Stop the head and raise ``error`` with ``message`` and the last lines of the log it names."""
    tail = "\n".join(_read(Path(info.temp_dir, log_name)).splitlines()[-30:]) or "(no log)"
    stop_head(info)
    raise error(f"{message}:\n{tail}")

"""Which Ray a workload runs on: one rule for every workload, decided once, logged once.

In this order:

1. **Already initialised** in this process (a test, a notebook, a caller's ``ray.init``): use it as is,
   and leave it running.
2. **An explicit address** (the ``ray_address`` config key, or the caller's argument): connect to it as
   given (``host:port``, ``ray://...``; ``auto``: the head ``ray start`` recorded in Ray's temp dir, never
   one merely running on the machine). ``"local"`` asks for a fresh local Ray: rule 5.
3. **Inside a Ray job**: Ray's job supervisor starts the entrypoint with ``RAY_JOB_CONFIG_JSON_ENV_VAR``
   and ``RAY_ADDRESS`` (the job's own cluster) in its environment; connect to that cluster.
4. **RAY_ADDRESS outside a job**: somebody exported it on purpose (``RAY_ADDRESS=host:6379 python -m
   ...``). It is an explicit choice, honoured like ``ray_address``, and logged so a run that went to a
   remote cluster says so.
5. **Standalone**: start a *private* local Ray (``include_dashboard=False``, no metrics export, event
   stats, task events or timeline (:data:`PRIVATE_SYSTEM_CONFIG`), no worker output forwarded to the
   driver, its own temp dir in a private folder that is removed afterwards). It never joins a cluster
   it merely finds on the machine: a bare ``ray.init()`` would attach to whichever head last wrote
   Ray's ``ray_current_cluster`` file (another user's, another test's), and run this job on it.
   ``ray.init`` still starts Ray's dashboard process (with only its usage-stats module), the
   autoscaler monitor and the log monitor: it has no public switch for them, and this module does not
   reach into Ray's private classes to leave them out (their cost: benchmarks/private_ray.md).

An address the user gave (rules 2 and 4) is probed first (:func:`check_ray_address`): one that accepts
no connection within :data:`ADDRESS_PROBE_S` fails with a :class:`ConfigError` naming it, where
``ray.init`` would retry for ever.

On exit, Ray is shut down only if this session initialised it (rules 2-5); the private folder of
rule 5 is removed. Given a :class:`RayCloser`, that shutdown runs on a thread beside the caller's
remaining work (finalize, writing the artifact), and the caller waits for it at the end.

A private local Ray is quiet (:func:`quiet_private_ray`): a standalone run prints its own progress
lines, not Ray's start-up notes (the token-auth notice of a cluster nobody else can reach) or Ray
Data's execution plan and progress log (the workload logs rows and rows/s itself). Real failures
still raise. Where the user has no Ray token anywhere, the private Ray gets one of its own in its
environment: a new local Ray otherwise writes the one it makes to ``~/.ray/auth_token``, machine-global
state that every later Ray command of the user's would pick up.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_ray_provider.workloads.common.errors import ConfigError

log = logging.getLogger(__name__)

#: Set by Ray's job supervisor in the environment of a job's entrypoint (the driver), with RAY_ADDRESS.
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
ADDRESS_ENV = "RAY_ADDRESS"
LOCAL = "local"
#: Ray settings of a private local Ray that nobody watches: what only a dashboard, a metrics scraper or the
#: state API would read is not collected (keys of Ray 2.60's ``ray_config_def.h``, accepted by ``ray.init``).
PRIVATE_SYSTEM_CONFIG: dict[str, object] = {
    "enable_metrics_collection": False,
    "event_stats": False,
    "enable_timeline": False,
    "task_events_report_interval_ms": 0,
}


#: How long an address the user gave may refuse connections before the run fails (a head that is
#: restarting gets this long); Ray's own ``ray.init`` retries an unreachable GCS without end.
ADDRESS_PROBE_S = 10.0


class SessionMode(str, enum.Enum):
    """How a workload got its Ray (the rule that applied, see the module docstring)."""

    EXISTING = "existing"
    ADDRESS = "address"
    JOB = "job"
    ENV = "env"
    LOCAL = "local"


@dataclass(frozen=True)
class RaySession:
    """The Ray a workload runs on.

    :param mode: which rule applied.
    :param address: the address passed to ``ray.init`` (``None`` for an existing or private local Ray).
    """

    mode: SessionMode
    address: str | None = None

    @property
    def owned(self) -> bool:
        """Whether this session initialises Ray (and so shuts it down at the end)."""
        return self.mode is not SessionMode.EXISTING

    def describe(self) -> str:
        """One line for the log: where the work runs and why."""
        if self.mode is SessionMode.EXISTING:
            return "using the Ray already initialised in this process"
        if self.mode is SessionMode.ADDRESS:
            return f"connecting to ray_address {self.address}"
        if self.mode is SessionMode.JOB:
            return f"inside a Ray job: connecting to the job's cluster at {self.address}"
        if self.mode is SessionMode.ENV:
            return (
                f"{ADDRESS_ENV}={self.address} is set outside a Ray job: connecting to it "
                f"(unset {ADDRESS_ENV} to run on a private local Ray instead)"
            )
        return (
            "standalone: starting a private local Ray (a Ray cluster running elsewhere on this machine is "
            "not joined; set ray_address to use one)"
        )


def plan_session(address: str | None, *, environ: Mapping[str, str], initialized: bool) -> RaySession:
    """Decide which Ray to use (pure: no Ray import, no side effects).

    :param address: the explicit address (config key ``ray_address`` or argument), if any.
    :param environ: the process environment.
    :param initialized: whether Ray is already initialised in this process.
    """
    if initialized:
        return RaySession(SessionMode.EXISTING)
    if address == LOCAL:
        return RaySession(SessionMode.LOCAL)
    if address:
        return RaySession(SessionMode.ADDRESS, address)
    env_address = environ.get(ADDRESS_ENV) or None
    if environ.get(JOB_CONFIG_ENV):
        return RaySession(SessionMode.JOB, env_address or "auto")
    if env_address:
        return RaySession(SessionMode.ENV, env_address)
    return RaySession(SessionMode.LOCAL)


def address_host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port``, ``[v6]:port`` or ``ray://host:port``; ``None`` for any other form
    (``auto``, no port: left to Ray)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_ray_address(address: str | None, *, seconds: float | None = None) -> None:
    """Fail fast when the Ray the workload would connect to is an address the user gave that nothing
    answers at (rules 2 and 4; a Ray job's own cluster, an initialised Ray and a private one are not
    probed). Called before any work, and again by :func:`ray_session`; a probe is one TCP connect.

    :param address: the explicit address (config key ``ray_address`` or argument), if any.
    :param seconds: how long it may refuse (default :data:`ADDRESS_PROBE_S`).
    :raises ConfigError: naming ``ray_address`` (or ``RAY_ADDRESS``), what refused, and the fix.
    """
    seconds = ADDRESS_PROBE_S if seconds is None else seconds
    ray_module = sys.modules.get("ray")  # not imported for this: a check before any work stays light
    initialized = bool(ray_module is not None and ray_module.is_initialized())
    session = plan_session(address, environ=os.environ, initialized=initialized)
    if session.mode not in (SessionMode.ADDRESS, SessionMode.ENV) or session.address is None:
        return
    target = address_host_port(session.address)
    if target is None:
        return
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(target, timeout=max(0.1, min(2.0, deadline - time.monotonic()))).close()
            return
        except OSError as exc:
            error = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    raise _address_error(
        session,
        f"nothing accepts connections at {target[0]}:{target[1]} (tried for "
        f"{seconds:g} s: {type(error).__name__}: {error})",
    )


def _address_error(session: RaySession, problem: str) -> ConfigError:
    """The error for an address the user gave (rule 2 or 4): the field, the problem, the fix."""
    if session.mode is SessionMode.ADDRESS:
        field, leave_out = "ray_address", "leave ray_address out"
    else:
        field, leave_out = f"{ADDRESS_ENV} (environment)", f"unset {ADDRESS_ENV}"
    return ConfigError(
        f"{field} {session.address!r}: {problem}; give a running cluster's address (its GCS, host:6379 by "
        f"default, or ray://host:10001 for Ray Client), or {leave_out} to run on a private local Ray"
    )


class RayCloser:
    """Runs a session's shutdown on a thread; :meth:`wait` (or leaving the ``with``) waits for it.

    Used as ``with RayCloser() as closer: with ray_session(address, closer): ...; write the artifact``:
    the artifact is written while Ray's processes exit, and the run ends only when they have.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        #: Monotonic time the shutdown finished (``None``: none ran, or it still runs).
        self.closed_at: float | None = None

    def close(self, shutdown: Callable[[], None]) -> None:
        """Start ``shutdown`` on a thread (one per closer)."""

        def run() -> None:
            try:
                shutdown()
            except BaseException as exc:  # raised by wait(), in the caller's thread
                self._error = exc
            self.closed_at = time.monotonic()

        self._thread = threading.Thread(target=run, name="ray-shutdown")
        self._thread.start()

    def wait(self) -> None:
        """Wait for the shutdown; re-raise its error."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> RayCloser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.wait()


@contextlib.contextmanager
def ray_session(address: str | None = None, closer: RayCloser | None = None) -> Iterator[RaySession]:
    """Connect to (or start) the Ray chosen by :func:`plan_session`; undo only what was done here.

    :param address: the explicit address (config key ``ray_address`` or argument), if any.
    :param closer: shuts Ray down on its thread (``None``: here, before the ``with`` is left).
    """
    import ray

    session = plan_session(address, environ=os.environ, initialized=ray.is_initialized())
    log.info("Ray session: %s", session.describe())
    check_ray_address(address)
    if not session.owned:
        yield session
        return
    private_dir = (
        tempfile.mkdtemp(prefix="rayw", dir=_temp_root()) if session.mode is SessionMode.LOCAL else None
    )

    def shutdown() -> None:
        # A private Ray's processes write into its folder until they exit: wait for them (Ray falls back
        # to SIGKILL), so that nothing outlives the session and the folder goes.
        try:
            ray.shutdown(wait_for_processes=private_dir is not None)
        finally:
            if private_dir is not None:
                shutil.rmtree(private_dir, ignore_errors=True)

    started = False
    try:
        with quiet_private_ray(private_dir is not None):
            if private_dir is not None:
                _start_private_ray(private_dir)
            else:
                _connect(session)
            started = True
            yield session
    finally:
        if closer is not None and started:
            closer.close(shutdown)
        else:
            shutdown()


#: Ray's own loggers and environment settings that :func:`quiet_private_ray` turns down.
_TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
_RAY_DATA_LOGGER = "ray.data"  # configured from RAY_DATA_LOG_LEVEL when ray.data is first imported
_QUIET_ENV = {  # read when ray.data is imported (here, or in a worker) / when Ray starts
    "RAY_DATA_LOG_LEVEL": "WARNING",
    "RAY_USAGE_STATS_ENABLED": "0",  # a private Ray reports nothing (and prints no usage-stats notice)
}


@contextlib.contextmanager
def quiet_private_ray(enabled: bool = True) -> Iterator[None]:
    """Turn Ray's notes down for a private local Ray (see the module docstring); undone on exit.

    A setting the user made in the environment is kept as it is.

    :param enabled: ``False`` changes nothing (a cluster the workload connects to keeps its logging).
    """
    if not enabled:
        yield
        return
    private_env = dict(_QUIET_ENV)
    sources = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    if not any(os.environ.get(key) for key in sources) and not (Path.home() / ".ray/auth_token").exists():
        private_env["RAY_AUTH_TOKEN"] = _process_token()  # Ray writes none into the user's home
    changed = [key for key in private_env if key not in os.environ]
    # ray.init sets RAY_AUTH_MODE in this process; left behind, a later private Ray (its GCS) or Job API
    # client here would take it for the user's and find no token.
    undo = [*changed, "RAY_AUTH_MODE"] if "RAY_AUTH_MODE" not in os.environ else changed
    quieter = {_TOKEN_NOTICE_LOGGER: logging.ERROR}
    if "ray.data" in sys.modules and "RAY_DATA_LOG_LEVEL" in changed:  # its logger is configured already
        quieter[_RAY_DATA_LOGGER] = logging.WARNING
    levels = {name: logging.getLogger(name).level for name in quieter}
    os.environ.update({key: private_env[key] for key in changed})
    for name, level in quieter.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for key in undo:
            os.environ.pop(key, None)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


@functools.cache
def _process_token() -> str:
    """The token of every private Ray this process starts: Ray keeps the token it first read for the
    life of the process, and could not reach a second private Ray that had another one."""
    return secrets.token_hex(32)


def _connect(session: RaySession) -> None:
    """``ray.init`` to the session's address; Ray finding no cluster there is the user's address's fault
    (rules 2 and 4: ``auto`` on a machine without one, a port that answers but is no Ray).

    ``auto`` given by the user means the head ``ray start`` recorded on this machine (Ray's
    ``ray_current_cluster`` file in its temp dir); Ray's own ``auto`` would otherwise join any head it
    finds among the machine's processes (another user's, another test's).
    """
    import ray

    address = session.address
    if address == "auto" and session.mode in (SessionMode.ADDRESS, SessionMode.ENV):
        recorded = Path(_temp_root(), "ray", "ray_current_cluster")
        address = recorded.read_text().strip() if recorded.is_file() else ""
        if not address:
            raise _address_error(session, f"Ray found no cluster there (no `ray start` head in {recorded})")
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except ConnectionError as exc:
        if session.mode not in (SessionMode.ADDRESS, SessionMode.ENV):
            raise
        raise _address_error(session, f"Ray found no cluster there ({exc})") from exc


def _start_private_ray(private_dir: str) -> None:
    """``ray.init`` a new local Ray in ``private_dir``; if it fails to start, log the end of its GCS log
    (the folder goes with the session) and stop what it started.

    A start that times out raises after some of Ray's processes are up, and ``ray.shutdown`` does not
    know them yet; they all run with ``private_dir`` on their command line.
    """
    import ray

    try:
        ray.init(
            address=LOCAL,
            include_dashboard=False,
            log_to_driver=False,  # a standalone run prints its own lines; errors still raise
            logging_level=logging.WARNING,
            _temp_dir=private_dir,
            # a copy: ray.init writes this session's spilling folder into the dict it is given
            _system_config=dict(PRIVATE_SYSTEM_CONFIG),
        )
    except BaseException:
        for path in sorted(Path(private_dir).glob("session_*/logs/gcs_server*")):
            log.error("Ray session: the private Ray did not start; %s ends:\n%s", path.name,
                      path.read_text(errors="replace")[-2000:])  # fmt: skip
        ray.shutdown(wait_for_processes=True)
        _kill_processes_in(private_dir)
        raise


def _kill_processes_in(private_dir: str, *, rounds: int = 10) -> None:
    """SIGKILL this user's processes that run in ``private_dir`` (named on their command line; Linux).

    Scans again until one finds none: a process can start a child between a scan and its kill.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return
    marks = (f"{private_dir}/".encode(), f"{private_dir}\0".encode())
    for _ in range(rounds):
        found = False
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if entry.stat().st_uid == os.getuid() and any(mark in cmdline for mark in marks):
                    os.kill(int(entry.name), signal.SIGKILL)
                    found = True
        if not found:
            return
        time.sleep(0.2)


def _temp_root() -> str:
    """Where the private folder goes: where Ray itself would put its temp dir on this machine.

    Ray's rule (``RAY_TMPDIR``, else ``TMPDIR`` on Linux, else ``/tmp``); the folder must stay short,
    since Ray's Unix sockets live below it (paths are limited to about 107 characters).
    """
    linux_tmp = os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None
    return os.environ.get("RAY_TMPDIR") or linux_tmp or "/tmp"

"""The local engine's task runner: worker processes on this machine (see :class:`~.scheduler.TaskRunner`).

One worker process per CPU slot, each with a pipe to the driver; a worker runs one batch at a time
with the Ray engine's task code (:func:`~.worker.run_batch`), so models, files and manifest rows are the
same. Staged chunks are Arrow IPC files the driver wrote (:mod:`.local_engine`); a worker memory-maps
each chunk it needs once (zero-copy), so no zone's rows are pickled or sent.

Workers come from a ``forkserver`` that imported the trainer code once: a fresh process started from a
clean one (never a fork of the driver, whose threads and locks a fork would copy), in milliseconds.

Failure isolation as on Ray: a worker that dies (a crash, ``os._exit``, the OOM killer) loses only its
batch, which the scheduler reruns one zone per task; a new worker takes its place. ``zone_timeout_s``:
each worker marks its zone on a clock in shared memory (:class:`~.timeouts.SharedZoneClock`), and the
driver kills and replaces a worker whose zone is past its limit, or whose task overran
:func:`.backstop.backstop_seconds`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, cast

from airflow_ray_provider.workloads.zone_training.backstop import backstop_seconds
from airflow_ray_provider.workloads.zone_training.timeouts import SharedZoneClock
from airflow_ray_provider.workloads.zone_training.worker import WorkerContext, ZoneWork, run_batch

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext
    from multiprocessing.process import BaseProcess

log = logging.getLogger(__name__)

#: Modules the forkserver imports once, so that each worker starts with them loaded.
PRELOAD = (
    "airflow_ray_provider.workloads.zone_training.process_pool",
    "airflow_ray_provider.workloads.zone_training.trainers",
    "pyarrow.parquet",
    "pandas",
    "sklearn.linear_model",
)
_STOP_S = 5.0
_CONTEXT = "forkserver"


def warm_up() -> None:
    """Start the forkserver now (it imports :data:`PRELOAD` in the background) so workers start fast later.

    Called before the dataset is validated, when the local engine is likely: the imports overlap it.
    """
    _short_socket_dir()
    context = multiprocessing.get_context(_CONTEXT)
    context.set_forkserver_preload(list(PRELOAD))
    from multiprocessing import forkserver

    forkserver.ensure_running()


#: The forkserver listens on ``<temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX`` and an AF_UNIX path has at
#: most 107 bytes: a longer ``TMPDIR`` than this leaves no room ("AF_UNIX path too long").
_MAX_TEMP_DIR_CHARS = 64


def _short_socket_dir() -> None:
    """Give multiprocessing a short temp dir for its sockets when ``TMPDIR`` is long.

    multiprocessing makes its own ``pymp-*`` dir once per process (and removes it at exit); making it
    here, under ``/tmp``, keeps the forkserver's socket path short without changing ``TMPDIR`` for
    anything else.
    """
    import tempfile
    from multiprocessing import util

    if len(tempfile.gettempdir()) <= _MAX_TEMP_DIR_CHARS or not os.access("/tmp", os.W_OK):
        return
    previous, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        util.get_temp_dir()  # creates and caches the pymp-* dir under /tmp
    finally:
        tempfile.tempdir = previous


def worker_main(
    conn: Connection, ctx: WorkerContext, chunk_paths: list[str], clock_cells: Any = None
) -> None:
    """A worker process: run the batches sent on ``conn`` until told to stop (``None``) or orphaned.

    :param clock_cells: the shared memory of this worker's zone clock (``None``: no ``zone_timeout_s``).
    """
    import pyarrow as pa

    tables: dict[int, Any] = {}
    clock = SharedZoneClock(clock_cells) if clock_cells is not None else None

    def table(chunk: int) -> Any:
        if chunk not in tables:  # zero-copy: the table's buffers point into the mapped file
            tables[chunk] = pa.ipc.open_file(pa.memory_map(chunk_paths[chunk])).read_all()
        return tables[chunk]

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the driver went away
            return
        if message is None:
            return
        key, works, chunks = message
        conn.send(run_batch(ctx, works, [table(c) for c in chunks], task_key=key, clock=clock))


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    clock: SharedZoneClock | None = None
    key: int | None = None
    started: float = 0.0
    zones: int = 0


class ProcessPool:
    """Worker processes running batch tasks; handles are the tasks' keys.

    :param ctx: what every task needs besides its zones.
    :param workers: processes (CPU slots: this machine's CPUs / ``num_cpus``).
    :param chunk_paths: the staged chunks' IPC files, by chunk number (empty for partitioned data).
    :param zone_timeout_s: the config's per-zone limit (``None``: none, no clock, no backstop).
    :param grace_s: the backstop's grace.
    """

    def __init__(
        self,
        ctx: WorkerContext,
        workers: int,
        chunk_paths: list[str],
        *,
        zone_timeout_s: float | None,
        grace_s: float,
    ) -> None:
        self._ctx = ctx
        self._chunk_paths = chunk_paths
        self._size = max(1, workers)
        self._limit = zone_timeout_s
        self._grace = grace_s
        self._mp = cast("ForkServerContext", multiprocessing.get_context(_CONTEXT))
        self._mp.set_forkserver_preload(list(PRELOAD))  # kept if warm_up already started the server
        self._workers: list[_Worker] = []
        self._queue: deque[tuple[int, list[ZoneWork], list[Any]]] = deque()
        self._starting: threading.Thread | None = None

    def start(self) -> None:
        """Start the workers in the background (the first start waits for the forkserver's imports)."""
        self._starting = threading.Thread(target=self._start_all, name="zone-pool-start", daemon=True)
        self._starting.start()

    def submit(self, key: int, works: list[ZoneWork], chunks: list[Any]) -> int:
        """Queue task ``key`` (``chunks``: chunk numbers); it starts on the next idle worker."""
        self._queue.append((key, works, chunks))
        self._dispatch()
        return key

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | str]]:
        """Tasks that finished or whose worker died within ``timeout``."""
        self._dispatch()
        busy = [w for w in self._workers if w.key is not None]
        if not busy:
            return []
        ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout))
        done: list[tuple[Any, dict[str, Any] | str]] = []
        for worker in busy:
            if worker.conn in ready or worker.process.sentinel in ready:
                key = worker.key
                done.append((key, self._receive(worker)))
        self._dispatch()
        return done

    def expired(self) -> list[tuple[Any, int | None]]:
        """Tasks with a zone past its limit, or past their backstop: their workers are killed and replaced.

        :returns: ``(key, the zone's index in the batch)``, or ``(key, None)`` past the backstop.
        """
        if self._limit is None:
            return []
        out: list[tuple[Any, int | None]] = []
        for worker in list(self._workers):
            if worker.key is None:
                continue
            index = worker.clock.overdue(self._limit) if worker.clock is not None else None
            late = time.monotonic() - worker.started > backstop_seconds(
                worker.zones, self._limit, self._grace
            )
            if index is not None or late:
                out.append((worker.key, index))
                self._replace(worker, kill=True)
        self._dispatch()
        return out

    def close(self) -> None:
        """Stop every worker: ask, wait up to 5 s, then kill."""
        if self._starting is not None:
            self._starting.join()
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
        deadline = time.monotonic() + _STOP_S
        for worker in self._workers:
            worker.process.join(max(deadline - time.monotonic(), 0.0))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
        self._workers = []

    # ----------------------------------------------------------------- internals
    def _start_all(self) -> None:
        for _ in range(self._size):
            self._workers.append(self._new_worker())

    def _new_worker(self) -> _Worker:
        parent, child = self._mp.Pipe()
        cells = self._mp.RawArray("d", 2) if self._limit is not None else None
        clock = SharedZoneClock(cells) if cells is not None else None
        process = self._mp.Process(
            target=worker_main,
            args=(child, self._ctx, self._chunk_paths, cells),
            name="zone-worker",
            daemon=True,
        )
        process.start()
        child.close()
        return _Worker(process, parent, clock)

    def _dispatch(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        for worker in self._workers:
            if not self._queue:
                return
            if worker.key is None:
                key, works, chunks = self._queue.popleft()
                worker.conn.send((key, works, chunks))
                worker.key, worker.started, worker.zones = key, time.monotonic(), len(works)

    def _receive(self, worker: _Worker) -> dict[str, Any] | str:
        try:
            out: dict[str, Any] = worker.conn.recv()
        except (EOFError, OSError):
            worker.process.join()
            reason = f"worker process died (exit code {worker.process.exitcode}) while training this task"
            self._replace(worker, kill=False)
            return reason
        worker.key = None
        return out

    def _replace(self, worker: _Worker, *, kill: bool) -> None:
        if kill:
            worker.process.kill()
        worker.process.join()
        worker.conn.close()
        self._workers[self._workers.index(worker)] = self._new_worker()

"""CPU the job's processes were busy: the dashboard's per-process CPU times, sampled while the job runs.

Each node's reporter agent publishes, every ``REPORTER_UPDATE_INTERVAL_MS`` (5 s by default), psutil's
stats of every worker process the raylet knows (task workers, actors, the job's supervisor and its
driver): ``pid``, ``createTime`` and ``cpuTimes`` (``user`` + ``system`` seconds). The dashboard keeps
the latest report per node; ``/test/dump?key=node_physical_stats`` answers it as received (``/nodes/{id}``
merges it into its worker list only every 15 s, too coarse for a short job, so it is the fallback).

One step takes one sample (:func:`read_dump`, then :meth:`BusyLedger.take`): :class:`BusySampler` drives
it every ~2 s from one background thread while an operator waits in its worker, :func:`asampling` from an
``asyncio`` task beside a trigger's poll loop (the one read in a worker thread; plain HTTP, no Ray process
either way), and :func:`repeating` / :func:`arepeating` run any such step between a RayJob wait's looks.
The ledger travels in the trigger's event (:meth:`BusyLedger.to_dict`).
:class:`BusyLedger` keeps, per process, the CPU seconds it gained while sampled. Which
processes were the job's is known only at the end (the tasks' ``worker_pid``, the actors' ``pid``, the
supervisor's and the driver's), so :func:`busy_seconds` picks them then. The figure is a lower bound:
what a process burnt after the last report that listed it (at most one reporter interval) is missed.
Sampling never fails the job: a read that fails is counted and named in the record.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_ray_provider.launch.usage.state import DashboardState

log = logging.getLogger(__name__)

#: Seconds between samples (the reporter refreshes every 5 s: faster sampling buys little).
SAMPLE_INTERVAL_S = 2.0
#: The dashboard route that answers each node's latest reporter payload as received.
DUMP_ROUTE = "/test/dump?key=node_physical_stats"

#: A process: node id, pid, its creation time (a reused pid is another process).
ProcessKey = tuple[str, int, float]


def cpu_seconds(worker: Mapping[str, Any]) -> float | None:
    """A process's own CPU seconds (``user`` + ``system``), ``None`` when the payload has none."""
    times = worker.get("cpuTimes") or {}
    if not isinstance(times, Mapping) or "user" not in times:
        return None
    return float(times.get("user") or 0.0) + float(times.get("system") or 0.0)


@dataclass
class _Series:
    """One process's counter: the part already banked, the baseline and the last value seen."""

    base: float
    last: float
    banked: float = 0.0

    def grown(self) -> float:
        return self.banked + self.last - self.base


@dataclass
class BusyLedger:
    """Per process, the CPU seconds gained while sampled (pure: fed payloads, no I/O).

    :param since: when the job began (seconds since the epoch): a process created after it counts from
        0, one created before it from its first sample (its start-up was not this job's).
    """

    since: float
    series: dict[ProcessKey, _Series] = field(default_factory=dict)
    samples: int = 0
    failures: int = 0
    last_error: str | None = None

    def add(self, node_id: str, workers: Iterable[Mapping[str, Any]]) -> None:
        """Take one node's worker list (a process that is gone keeps its last value)."""
        for worker in workers:
            used = cpu_seconds(worker)
            if used is None or worker.get("pid") is None:
                continue
            created = float(worker.get("createTime") or 0.0)
            key = (node_id, int(worker["pid"]), created)
            seen = self.series.get(key)
            if seen is None:
                self.series[key] = _Series(base=0.0 if created >= self.since else used, last=used)
            elif used < seen.last:  # a counter that went back: bank what it had, start again from here
                seen.banked, seen.base, seen.last = seen.grown(), used, used
            else:
                seen.last = used

    def add_dump(self, body: Mapping[str, Any]) -> None:
        """Take a ``/test/dump?key=node_physical_stats`` answer (every node's latest report)."""
        data = (body or {}).get("data") or {}
        nodes = data.get("nodePhysicalStats") or data.get("node_physical_stats") or {}
        for node_id, stats in nodes.items():
            self.add(str(node_id), (stats or {}).get("workers") or [])
        self.samples += 1

    def failed(self, why: str) -> None:
        """A sample that could not be read."""
        self.failures += 1
        self.last_error = why

    def take(self, body: Mapping[str, Any] | None, why: str | None) -> None:
        """The one step of a sample: a :func:`read_dump` answer (``why``: it could not be read)."""
        if why is not None or body is None:
            self.failed(why or "no answer")
        else:
            self.add_dump(body)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (a trigger's event): per process that gained CPU, its key and the seconds gained."""
        return {
            "since": self.since, "samples": self.samples, "failures": self.failures,
            "last_error": self.last_error,
            "processes": [[*key, round(s.grown(), 6)] for key, s in self.series.items() if s.grown() > 0],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BusyLedger:
        """The ledger of :meth:`to_dict` (each process's gain banked: it is not sampled again)."""
        ledger = cls(
            since=float(data["since"]), samples=int(data.get("samples") or 0),
            failures=int(data.get("failures") or 0), last_error=data.get("last_error"),
        )  # fmt: skip
        for node, pid, created, grown in data.get("processes") or []:
            ledger.series[(str(node), int(pid), float(created))] = _Series(0.0, 0.0, float(grown))
        return ledger

    def busy_seconds(self, pids: Mapping[str, set[int]], *, until: float | None = None) -> float:
        """CPU seconds gained by the processes ``pids`` names (node id -> pids; ``""``: any node),
        leaving out a process created after ``until`` (a pid reused once the job had ended)."""
        total = 0.0
        for (node, pid, created), series in self.series.items():
            if pid not in pids.get(node, set()) and pid not in pids.get("", set()):
                continue
            if until is not None and created > until:
                continue
            total += max(0.0, series.grown())
        return total

    def note(self) -> str | None:
        """What the record should say about this figure (``None``: nothing to add)."""
        if self.samples == 0:
            return f"no CPU sample could be read ({self.last_error or 'the job ended before the first'})"
        lost = f"; {self.failures} sample(s) could not be read: {self.last_error}" if self.failures else ""
        return (
            "a lower bound: CPU a process used after the last stats report that listed it (the dashboard's "
            f"reporter sends one every 5 s by default) is not counted; {self.samples} sample(s){lost}"
        )


def job_processes(
    *,
    tasks: Iterable[Mapping[str, Any]],
    actors: Iterable[Mapping[str, Any]],
    supervisor: Mapping[str, Any] | None,
    job: Mapping[str, Any] | None,
) -> dict[str, set[int]]:
    """The job's processes, node id -> pids: its task workers, its actors, its supervisor, its driver."""
    out: dict[str, set[int]] = {}

    def put(node: Any, pid: Any) -> None:
        try:
            out.setdefault(str(node or ""), set()).add(int(pid))
        except (TypeError, ValueError):
            return

    for task in tasks:
        if task.get("worker_pid"):
            put(task.get("node_id"), task["worker_pid"])
    for actor in [*actors, *([supervisor] if supervisor else [])]:
        if actor.get("pid"):
            put((actor.get("address") or {}).get("nodeId"), actor["pid"])
    driver = (job or {}).get("driver_info") or {}
    if driver.get("pid"):
        put((job or {}).get("driver_node_id"), driver["pid"])
    return out


def read_dump(state: DashboardState) -> tuple[Any, str | None]:
    """One read of every node's latest process stats: ``(body, None)``, or ``(None, why)`` (never raises)."""
    try:
        return state.get(DUMP_ROUTE), None
    except Exception as exc:
        return None, str(exc)


class BusySampler:
    """Sample the dashboard's process CPU times every ``interval`` seconds from one daemon thread.

    :param state: the cluster's dashboard.
    :param since: when the job began (see :class:`BusyLedger`).
    :param interval: seconds between samples.
    """

    def __init__(self, state: DashboardState, *, since: float, interval: float = SAMPLE_INTERVAL_S) -> None:
        self.state = state
        self.ledger = BusyLedger(since=since)
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="usage-busy", daemon=True)

    def sample(self) -> None:
        """One sample; a failure is counted, never raised."""
        body, why = read_dump(self.state)
        with self._lock:
            self.ledger.take(body, why)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> BusySampler:
        """Begin sampling (the first sample at once)."""
        self._thread.start()
        return self

    def stop(self) -> BusyLedger:
        """Stop, with one last sample (the job's processes may still be listed); the ledger. Once."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=self.state.timeout + 1.0)
            self.sample()
        return self.ledger

    def close(self) -> None:
        """Stop without a last sample or waiting for the thread (it ends after its current read)."""
        self._stop.set()


@contextmanager
def sampling(state: DashboardState | None, *, since: float | None = None) -> Iterator[BusySampler | None]:
    """Sample while the block runs (``state`` ``None``: no sampling); the sampler stops on the way out.

    :param since: when the job began (default: now).
    """
    if state is None:
        yield None
        return
    sampler = BusySampler(state, since=since if since is not None else time.time()).start()
    try:
        yield sampler
    finally:
        sampler.close()


@asynccontextmanager
async def asampling(
    state: DashboardState | None, ledger: BusyLedger, *, interval: float = SAMPLE_INTERVAL_S
) -> AsyncIterator[BusyLedger]:
    """Sample into ``ledger`` every ``interval`` seconds from an ``asyncio`` task while the block runs
    (a trigger's wait; ``state`` ``None``: no sampling); on the way out the task is cancelled and one last
    sample taken. The read runs in a worker thread (:func:`read_dump`), so no thread outlives a sample."""
    if state is None:
        yield ledger
        return

    def sample() -> None:
        ledger.take(*read_dump(state))

    try:
        async with arepeating(sample, interval=interval, at_once=True):
            yield ledger
    finally:
        await asyncio.to_thread(sample)


@contextmanager
def repeating(step: Callable[[], None], *, interval: float = SAMPLE_INTERVAL_S) -> Iterator[None]:
    """Run ``step`` every ``interval`` seconds from one daemon thread while the block runs (the first
    after one interval; a wait's own looks sample too). ``step`` must not raise (a sample never does)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            step()

    thread = threading.Thread(target=loop, name="usage-busy", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()  # the thread ends after its current step; a step is one bounded HTTP read


@asynccontextmanager
async def arepeating(
    step: Callable[[], None], *, interval: float = SAMPLE_INTERVAL_S, at_once: bool = False
) -> AsyncIterator[None]:
    """:func:`repeating` on an event loop: ``step`` (blocking) in a worker thread every ``interval`` seconds
    from an ``asyncio`` task (``at_once``: the first right away), cancelled on the way out."""

    async def loop() -> None:
        if at_once:
            await asyncio.to_thread(step)
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(step)

    task = asyncio.create_task(loop(), name="usage-busy")
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task

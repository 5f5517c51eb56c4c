"""The Ray engine's task runner: each batch is a Ray task (see :class:`~.scheduler.TaskRunner`).

The worker context goes to the object store once; a task gets it, its zones and, for staged data, the
chunk tables it slices its zones from (zero-copy on the node). The context's and the chunks' object
refs travel *inside a list*, so Ray does not resolve them as task arguments: every batch task then has
the same scheduling key (which includes a task's object arguments), so Ray's owner hands a worker that
finishes a task the next queued one on the same lease, and each worker fetches each object once per
run and keeps it (:func:`_resolved`) instead of deserialising the chunk tables for every task
(with 30 ms tasks and four 44 MB tables: 2.4-2.7 ms between tasks instead of 3.4-3.5 ms). A worker
holds the last run's objects until it gets a task of another run or exits (the workers of a Ray job
exit with it). Ray retries a task whose worker died ``max_retries`` times; then the scheduler isolates
its zones. ``zone_timeout_s``: each task's zone clock reports a zone past its limit to the run's
board (:mod:`.timeouts`, :mod:`.backstop`), and the driver cancels that task with ``force=True``,
which kills its worker.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.zone_training.backstop import Backstop
from airflow_ray_provider.workloads.zone_training.timeouts import ReportingZoneClock
from airflow_ray_provider.workloads.zone_training.worker import WorkerContext, ZoneWork, run_batch

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig


def _batch_task(refs: list[Any], zones: list[ZoneWork], key: int, board: Any) -> dict[str, Any]:
    """One batch: ``refs`` are the worker context's ref, then the chunk tables' refs (not resolved by Ray).

    Fetching them is part of the task: its seconds are added to the task's figures.
    """
    started, started_cpu, started_wall = time.perf_counter(), time.process_time(), time.time()
    ctx, *tables = _resolved(refs)
    fetch_s, fetch_cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
    if board is None:
        out = run_batch(ctx, zones, tables, task_key=key)
    else:
        with ReportingZoneClock(ctx.zone_timeout_s or 0.0, lambda i: board.timed_out.remote(key, i)) as clock:
            out = run_batch(
                ctx, zones, tables, on_start=lambda: board.started.remote(key), task_key=key, clock=clock
            )
    out.update(task_s=out["task_s"] + fetch_s, task_cpu_s=out["task_cpu_s"] + fetch_cpu_s)
    out["wall"] = (started_wall, out["wall"][1])
    return out


_objects: dict[Any, Any] = {}
"""This worker's fetched objects of the current run: the first ref of a task (the run's context) and
its chunks, by ref."""


def _resolved(refs: list[Any]) -> list[Any]:
    """The objects of ``refs``, each fetched once per run in this worker (a new context ref starts over)."""
    import ray

    if refs[0] not in _objects:
        _objects.clear()  # another run: let its objects go
    missing = [ref for ref in refs if ref not in _objects]
    if missing:
        _objects.update(zip(missing, ray.get(missing), strict=True))
    return [_objects[ref] for ref in refs]


class RayTasks:
    """Batch tasks on the connected Ray cluster.

    :param cfg: the run's config (``num_cpus``, ``max_retries``, ``zone_timeout_s``).
    :param ctx: what every task needs besides its zones.
    :param grace_s: the backstop's grace (see :func:`.backstop.backstop_seconds`).
    """

    def __init__(self, cfg: ZoneTrainingConfig, ctx: WorkerContext, grace_s: float) -> None:
        import ray

        self._ray = ray
        self._ctx_ref = ray.put(ctx)
        self._task = ray.remote(_batch_task).options(
            num_cpus=cfg.num_cpus, max_retries=cfg.max_retries, retry_exceptions=False
        )
        self._keys: dict[Any, int] = {}
        self._backstop: Backstop | None = None
        if cfg.zone_timeout_s is not None:
            self._backstop = Backstop(ray, cfg.zone_timeout_s, grace_s)

    def submit(self, key: int, works: list[ZoneWork], chunks: list[Any]) -> Any:
        """Submit task ``key``; ``chunks`` are the staged chunks' object refs."""
        board = self._backstop.board if self._backstop else None
        ref = self._task.remote([self._ctx_ref, *chunks], works, key, board)
        self._keys[ref] = key
        if self._backstop:
            self._backstop.track(key, len(works))
        return ref

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | str]]:
        """The first task to finish within ``timeout`` (``ray.wait(num_returns=1)``), fetched."""
        if not handles:
            return []
        ready, _ = self._ray.wait(handles, num_returns=1, timeout=timeout)
        done: list[tuple[Any, dict[str, Any] | str]] = []
        for ref in ready:
            self._forget(ref)
            try:
                done.append((ref, self._ray.get(ref)))
            except self._ray.exceptions.RayError as exc:
                done.append((ref, _first_line(exc)))
        return done

    def expired(self) -> list[tuple[Any, int | None]]:
        """Tasks with a zone past its limit, or past their backstop, cancelled now (``force=True`` kills
        the worker): ``(ref, the zone's index in the batch or None)``."""
        if self._backstop is None:
            return []
        overdue = dict(self._backstop.overdue())
        out = [(ref, overdue[key]) for ref, key in self._keys.items() if key in overdue]
        for ref, _ in out:
            self._forget(ref)
            self._ray.cancel(ref, force=True)
        return out

    def close(self) -> None:
        """End the backstop's board actor."""
        if self._backstop is not None:
            self._backstop.close()

    def _forget(self, ref: Any) -> None:
        key = self._keys.pop(ref, None)
        if self._backstop is not None and key is not None:
            self._backstop.forget(key)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(exc).__name__}: {first}"[:500]

"""The Ray engine's task runner: each batch is a Ray task (see :class:`~.scheduler.TaskRunner`).

The worker context goes to the object store once; a task gets it, its zones and, for staged data, the
chunk tables it slices its zones from (object refs, zero-copy on the node). Ray retries a task whose
worker died ``max_retries`` times; then the scheduler isolates its zones. ``zone_timeout_s`` has a
driver-side backstop (:mod:`.backstop`): an overdue task is cancelled with ``force=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.zone_training.backstop import Backstop
from airflow_ray_provider.workloads.zone_training.worker import WorkerContext, ZoneWork, run_batch

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig


def _batch_task(
    ctx: WorkerContext, zones: list[ZoneWork], key: int, board: Any, *tables: Any
) -> dict[str, Any]:
    on_start = (lambda: board.started.remote(key)) if board is not None else None
    return run_batch(ctx, zones, tables, on_start=on_start, task_key=key)


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
        ref = self._task.remote(self._ctx_ref, works, key, board, *chunks)
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

    def expired(self) -> list[Any]:
        """Tasks past their backstop, cancelled now (``force=True`` kills the worker)."""
        if self._backstop is None:
            return []
        overdue = set(self._backstop.overdue())
        refs = [ref for ref, key in self._keys.items() if key in overdue]
        for ref in refs:
            self._forget(ref)
            self._ray.cancel(ref, force=True)
        return refs

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

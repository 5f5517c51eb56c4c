"""The driver's own scoring on a Ray run: blocks from the end of the input, on a thread, from the moment
preflight is done, while Ray connects (or starts) and the scoring actors start. On a running cluster
the run connects only once this thread holds its first block (:meth:`DriverScorer.first_block`): Ray's
import and ``ray.init`` beside preflight and that block would delay the first row by their CPU time
(one GIL; :func:`~.engine.run_engine`).

Without it a Ray run scores nothing before ``ray.init`` returns (2-5 s standalone on 2 cores, about
1 s on a running cluster), while the in-process engine holds its first block right after preflight.
``ray.init`` and the actors' start are mostly waiting on other processes and native code, so a thread
beside them scores at nearly full speed (on 2 cores it still slows a private Ray's start somewhat:
benchmarks/evaluate.md, "first row on Ray").

Every block is scored exactly once: the read units sit in one :class:`UnitQueue`; the actor pools take
from its front, this thread from its back, each take under one lock. The thread scores with the models
preflight loaded and the same per-block code (:class:`~.block.BlockEvaluator`), so the merge (exact and
order-independent) gives the same metrics whoever scored a block. Preflight comes first: the thread
starts scoring only once preflight has passed, so a preflight error still wins, and a run that fails
writes no artifact whatever the thread scored.

The thread stops when the queue is empty or when it is halted (:meth:`DriverScorer.halt`: every actor
is ready; :meth:`DriverScorer.stop`: the engine turned out to be the in-process one, which then scores
the rest itself, or the run failed). BLAS and OpenMP run one thread while it scores (the other cores
are the actors'), as in the in-process engine's block threads.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.block import BlockPartial
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.preflight import Preflight, PreflightRun

log = logging.getLogger(__name__)


class UnitQueue:
    """The read units not taken yet, by index: pools take the front, the driver's thread the back."""

    def __init__(self, count: int) -> None:
        self._todo = collections.deque(range(count))
        self._lock = threading.Lock()

    def front(self) -> int | None:
        """Take the first unit left (``None``: none left)."""
        with self._lock:
            return self._todo.popleft() if self._todo else None

    def back(self) -> int | None:
        """Take the last unit left (``None``: none left)."""
        with self._lock:
            return self._todo.pop() if self._todo else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._todo)


class DriverScorer:
    """Scores units from the back of the :class:`UnitQueue` on a thread, once preflight has passed.

    :param checks: the preflight on its thread; nothing is scored before it passed.
    :param predictions_uri: where the per-block prediction files go (``None``: none).
    """

    def __init__(self, cfg: EvalConfig, checks: PreflightRun, predictions_uri: str | None) -> None:
        self._cfg, self._checks, self._predictions_uri = cfg, checks, predictions_uri
        self._ready = threading.Event()  # the queue exists (preflight passed) or preflight failed
        self._stop = threading.Event()
        self._first = threading.Event()  # the first block is held, or the thread ended without one
        self._lock = threading.Lock()
        self._done: list[tuple[BlockPartial, int]] = []
        self._error: BaseException | None = None
        self._queue: UnitQueue | None = None
        #: Monotonic time this thread finished its first block (``None``: none yet).
        self.first_at: float | None = None
        self.blocks = 0
        self._thread = threading.Thread(target=self._run, name="eval-driver-scoring", daemon=True)
        self._thread.start()

    def queue(self) -> UnitQueue:
        """The shared queue of units (waits for preflight; raises preflight's error)."""
        self._checks.result()
        self._ready.wait()
        assert self._queue is not None  # made before ready is set, once preflight passed
        return self._queue

    def take(self) -> list[tuple[BlockPartial, int]]:
        """The partials scored since the last call, with the stored bytes each read; raises the
        thread's error."""
        with self._lock:
            done, self._done = self._done, []
        self._raise()
        return done

    def first_block(self) -> None:
        """Wait until the thread holds its first block (or ended without one: no unit left, its error);
        raises preflight's error."""
        self._first.wait()
        self._checks.result()

    def halt(self) -> None:
        """Take no further unit (the one being scored is still added)."""
        self._stop.set()

    def stop(self) -> list[tuple[BlockPartial, int]]:
        """Take no further unit; wait for the one being scored; return what :meth:`take` would."""
        self._stop.set()
        self._thread.join()
        return self.take()

    def busy(self) -> bool:
        """Whether the thread may still add a partial."""
        return self._thread.is_alive()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        try:
            pre = self._checks.result()
        except BaseException:  # preflight's error is the run's: raised where the run asks for it
            self._ready.set()
            self._first.set()
            return
        self._queue = UnitQueue(len(pre.units))
        self._ready.set()
        try:
            self._score(pre, self._queue)
        except BaseException as exc:  # raised by take(), in the run's thread
            self._error = exc
        finally:
            self._first.set()

    def _score(self, pre: Preflight, queue: UnitQueue) -> None:
        from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator, Setup, native_threads
        from airflow_ray_provider.workloads.evaluation.source import read_unit_counted

        setup = Setup(pre.features, pre.has_proba, pre.loaded)
        evaluator = BlockEvaluator(self._cfg, pre.features, pre.has_proba, self._predictions_uri, pre.loaded)
        with native_threads(1):
            while not self._stop.is_set():
                unit = queue.back()
                if unit is None:
                    break
                table, nbytes = read_unit_counted(pre.units[unit], self._cfg.data_uri, pre.read_columns)
                partial = evaluator.score_block(table, setup)
                with self._lock:
                    self._done.append((partial, nbytes))
                    self.blocks += 1
                    if self.first_at is None:
                        self.first_at = time.monotonic()
                self._first.set()
        log.info("the driver scored %d of %d block(s) itself", self.blocks, len(pre.units))

    def __enter__(self) -> DriverScorer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

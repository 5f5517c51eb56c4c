"""What one training task does: build its zones' input once, then fit zones and write their models.

Runs inside a Ray worker (plain Python, no Ray calls, so it is testable in-process). The batch's rows
become one DataFrame, or for array trainers one feature block and one label array (:mod:`.frame`);
each zone gets a 0-based slice or views of it. Zones go in groups: fit a group, then save its models
(:mod:`.bundles`: one file per zone, or one bundle per task written once its zones are done; always
atomically, see :mod:`.writes`). A zone that raises is recorded as failed and the batch goes on;
only small result rows go back to the driver. Each fit is marked on the task's zone clock, if it has
one (``zone_timeout_s``, :mod:`.timeouts`): a zone past its limit ends with the worker process, from
outside.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.zone_training.bundles import ModelSaver
from airflow_ray_provider.workloads.zone_training.frame import Segment, segments_arrays, segments_frame
from airflow_ray_provider.workloads.zone_training.manifest import manifest_row
from airflow_ray_provider.workloads.zone_training.trainers import (
    TrainerFn,
    array_entry,
    clean_metrics,
    load_trainer,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.fs as pafs

    from airflow_ray_provider.workloads.zone_training.timeouts import ZoneClock

log = logging.getLogger(__name__)

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
GROUP_ZONES = 32
"""Zones fitted one after another before their models are written (see :func:`run_batch`)."""
_MAX_LOGGED_TRACEBACKS = 5
_ERROR_CHARS = 2000


@dataclass(frozen=True)
class ZoneWork:
    """One zone of a batch: its key, expected rows, where its rows are, and its manifest attempt.

    :param pieces: staged data: ``(argument index, first row, rows)`` per chunk; partitioned data:
        the zone's Parquet file paths.
    """

    key: str
    rows: int
    pieces: tuple[Any, ...]
    attempt: int = 1


@dataclass(frozen=True)
class WorkerContext:
    """Everything a task needs besides its zones (put in the object store once per run)."""

    fs: pafs.FileSystem
    zone_column: str
    label_column: str
    feature_columns: list[str]
    file_columns: list[str]
    models_uri: str
    trainer: str
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    threads: int = 1
    zone_timeout_s: float | None = None
    zone_retries: int = 0
    partitioned: bool = False
    artifacts: str = "per_zone"
    run_token: str = "run"


def thread_env(threads: int) -> dict[str, str]:
    """Environment that caps OpenMP/MKL/OpenBLAS threads."""
    return dict.fromkeys(THREAD_ENV_VARS, str(threads))


_applied_threads: int | None = None
_trainers: dict[str, TrainerFn] = {}
_tracebacks_logged = 0


def apply_thread_budget(threads: int) -> None:
    """Cap the math libraries of this process to ``threads``.

    The environment variables reach libraries loaded later (they read them at load time);
    ``threadpoolctl`` resizes the pools of those already loaded (NumPy's BLAS, scikit-learn's OpenMP,
    loaded here first). Done in the task rather than through a per-task ``runtime_env``, which would
    make Ray start a separate worker pool (about 5 s more per job on 2 cores).
    """
    global _applied_threads
    os.environ.update(thread_env(threads))
    if _applied_threads == threads:
        return
    import contextlib

    from threadpoolctl import threadpool_limits

    with contextlib.suppress(ImportError):  # load OpenMP now so that the limit reaches it
        import sklearn.utils._openmp_helpers  # noqa: F401
    threadpool_limits(limits=threads)
    _applied_threads = threads


def run_batch(
    ctx: WorkerContext,
    zones: Sequence[ZoneWork],
    tables: Sequence[pa.Table],
    *,
    on_start: Callable[[], Any] | None = None,
    task_key: int = 0,
    clock: ZoneClock | None = None,
) -> dict[str, Any]:
    """Train every zone of a batch; return its result rows and the task's figures.

    The figures: ``task_s``, the whole task (wall seconds); ``task_cpu_s``, this process's CPU seconds
    meanwhile (less than ``task_s`` when the task's core ran other processes); ``zones_s``, the zones'
    share of ``task_s`` (without one-off imports and the batch's data preparation); ``rows``; ``wall``,
    the task's (start, end) as epoch seconds. ``results`` holds one manifest row per zone.

    Zones go in groups of :data:`GROUP_ZONES`: slice the group's inputs, fit them, then write their
    models. Doing each step for a few zones in a row, rather than all steps zone by zone, keeps the
    interpreter's and the CPU's caches warm: with ~1 ms Ridge fits, in-process, it cut the per-zone
    work around the fit from about 200 to 100 µs here, and the fits ran about 10 % faster too.

    :param on_start: called once the batch is ready and its first zone starts (after one-off imports).
    :param task_key: the task's number in the run (names its model bundle, see :mod:`.bundles`).
    :param clock: marks each fit's zone (its index in ``zones``) and start (``zone_timeout_s``).
    """
    started, started_wall, started_cpu = time.perf_counter(), time.time(), time.process_time()
    apply_thread_budget(ctx.threads)
    try:
        batch = BatchInput(ctx, _trainer(ctx.trainer), zones, tables)
    except Exception as exc:
        error = f"could not prepare the batch: {type(exc).__name__}: {exc}"[:_ERROR_CHARS]
        rows = [_failed(z, error, z.rows, 0.0, 0.0) for z in zones]
        done = time.perf_counter()
        wall = (started_wall, started_wall + done - started)
        task_cpu = time.process_time() - started_cpu
        return {
            "results": rows,
            "task_s": done - started,
            "task_cpu_s": task_cpu,
            "zones_s": 0.0,
            "rows": 0,
            "wall": wall,
        }
    if on_start is not None:
        on_start()
    zones_started = time.perf_counter()
    saver = ModelSaver(ctx.models_uri, ctx.artifacts, f"part-{ctx.run_token}-{task_key:05d}")
    results: list[dict[str, Any]] = []
    for first in range(0, len(zones), GROUP_ZONES):
        group = range(first, min(first + GROUP_ZONES, len(zones)))
        calls = [batch.zone_call(i) for i in group]
        fitted = [
            fit_zone(ctx, zones[i], rows, call, clock=clock, index=i)
            for i, (rows, call) in zip(group, calls, strict=True)
        ]
        results.extend(save_zone(saver, outcome) for outcome in fitted)
    saver.flush()
    done = time.perf_counter()
    return {
        "results": results,
        "task_s": done - started,
        "task_cpu_s": time.process_time() - started_cpu,
        "zones_s": done - zones_started,
        "rows": batch.rows,
        "wall": (started_wall, started_wall + done - started),
    }


ZoneCall = Callable[[], Any]
"""Calls the trainer on one zone's rows (bound arguments), returning what the trainer returns."""


class BatchInput:
    """The batch's rows in the form its trainer takes, built once; :meth:`zone_call` per zone.

    DataFrame trainers get a 0-based slice of one batch DataFrame (:func:`build_frame`); array
    trainers (:func:`~.trainers.array_entry`) get views of one float64 feature block and the labels.
    """

    def __init__(
        self, ctx: WorkerContext, trainer: TrainerFn, zones: Sequence[ZoneWork], tables: Sequence[pa.Table]
    ) -> None:
        self._ctx = ctx
        self._trainer = trainer
        self._arrays = array_entry(trainer)
        segments, sizes = _batch_segments(ctx, zones, tables)
        ends = list(itertools.accumulate(sizes))
        self.bounds = [(end - size, end) for end, size in zip(ends, sizes, strict=True)]
        self.rows = ends[-1] if ends else 0
        if self._arrays is not None:
            self._x, self._y = segments_arrays(segments, ctx.label_column, ctx.feature_columns)
        else:
            self._frame = build_frame(ctx, zones, segments, sizes)

    def zone_call(self, index: int) -> tuple[int, ZoneCall]:
        """Zone ``index``'s row count and the trainer call on its rows (nothing is copied)."""
        lo, hi = self.bounds[index]
        ctx, kwargs = self._ctx, self._ctx.trainer_kwargs
        if self._arrays is not None:
            fn, x, y, names = self._arrays, self._x[lo:hi], self._y[lo:hi], list(ctx.feature_columns)
            return hi - lo, lambda: fn(x, y, feature_names=names, **kwargs)
        part, trainer = zone_part(self._frame, lo, hi), self._trainer
        label, features = ctx.label_column, list(ctx.feature_columns)
        return hi - lo, lambda: trainer(part, label_column=label, feature_columns=features, **kwargs)


def zone_part(frame: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """Rows ``lo:hi`` of the batch frame, indexed from 0 (a copy-on-write slice: nothing is copied).

    Setting the new index on the slice costs about half of ``reset_index(drop=True)`` (12 vs 21 µs).
    """
    import pandas as pd

    part = frame.iloc[lo:hi]
    part.index = pd.RangeIndex(hi - lo)
    return part


def _trainer(spec: str) -> TrainerFn:
    if spec not in _trainers:
        _trainers[spec] = load_trainer(spec)
    return _trainers[spec]


def _batch_segments(
    ctx: WorkerContext, zones: Sequence[ZoneWork], tables: Sequence[pa.Table]
) -> tuple[list[Segment], list[int]]:
    """Every zone's row slices, zone after zone, and each zone's row count."""
    segments: list[Segment] = []
    sizes: list[int] = []
    for zone in zones:
        zone_segments = _zone_segments(ctx, zone, tables)
        sizes.append(sum(rows for _, _, rows in zone_segments))
        segments.extend(zone_segments)
    return segments, sizes


def build_frame(
    ctx: WorkerContext, zones: Sequence[ZoneWork], segments: Sequence[Segment], sizes: Sequence[int]
) -> pd.DataFrame:
    """One DataFrame with the batch's zones one after another (zone ``i`` has ``sizes[i]`` rows).

    The zone column is rebuilt as a pandas ``Categorical`` of the zone keys: converting the original
    string column costs about as much as a small model's fit.
    """
    import numpy as np
    import pandas as pd

    frame = segments_frame(segments, [ctx.label_column, *ctx.feature_columns])
    codes = np.repeat(np.arange(len(zones), dtype=np.int32), sizes)
    frame.insert(0, ctx.zone_column, pd.Categorical.from_codes(codes, categories=[z.key for z in zones]))
    return frame


def _zone_segments(ctx: WorkerContext, zone: ZoneWork, tables: Sequence[pa.Table]) -> list[Segment]:
    """Where the zone's rows are: slices of the staged chunks, or its whole partition files."""
    import pyarrow.parquet as pq

    if not ctx.partitioned:
        return [(tables[arg], start, rows) for arg, start, rows in zone.pieces]
    columns = [ctx.label_column, *ctx.feature_columns]
    out: list[Segment] = []
    for path in zone.pieces:
        with ctx.fs.open_input_file(path) as src:
            table = pq.ParquetFile(src).read(columns=[c for c in ctx.file_columns if c in columns])
        out.append((table, 0, table.num_rows))
    return out


@dataclass
class FitOutcome:
    """A zone's fit: the model and metrics, or the error; its rows, wall seconds and CPU seconds."""

    zone: ZoneWork
    rows: int
    duration_s: float
    cpu_s: float
    model: Any = None
    metrics: dict[str, Any] | None = None
    error: str | None = None


def fit_zone(
    ctx: WorkerContext,
    zone: ZoneWork,
    rows: int,
    call: ZoneCall,
    *,
    clock: ZoneClock | None = None,
    index: int = 0,
) -> FitOutcome:
    """Fit one zone, with ``zone_retries`` extra tries on exceptions; each try is marked on ``clock``.

    ``cpu_s`` is the CPU time of the trainer calls (all tries), the "per-fit CPU" of the benchmarks.

    :param rows: the zone's rows.
    :param call: the trainer call on the zone's rows (see :meth:`BatchInput.zone_call`).
    :param clock: the task's zone clock (``zone_timeout_s``, :mod:`.timeouts`), if any.
    :param index: the zone's index in its batch (what ``clock`` records).
    """
    started = time.perf_counter()
    tries = 1 + ctx.zone_retries
    error = "not run"
    cpu = 0.0
    for attempt in range(1, tries + 1):
        cpu_start = time.process_time()
        try:
            model, metrics = _timed_call(call, clock, index)
        except Exception as exc:
            cpu += time.process_time() - cpu_start
            error = _describe(exc, zone.key, attempt, tries)
            continue
        cpu += time.process_time() - cpu_start
        return FitOutcome(zone, rows, time.perf_counter() - started, cpu, model, metrics)
    return FitOutcome(zone, rows, time.perf_counter() - started, cpu, error=error)


def save_zone(saver: ModelSaver, outcome: FitOutcome) -> dict[str, Any]:
    """Save a fitted zone's model (its file, or the task's bundle) and return its manifest row.

    A failed fit's row is returned as is; a bundled zone's row is completed by ``saver.flush()``.
    """
    zone, rows, duration, cpu = outcome.zone, outcome.rows, outcome.duration_s, outcome.cpu_s
    if outcome.error is not None:
        return _failed(zone, outcome.error, rows, duration, cpu)
    row = manifest_row(
        zone.key, "succeeded", rows=rows, attempt=zone.attempt, duration_s=duration, cpu_s=cpu, metrics=None
    )
    try:
        row["metrics"] = json.dumps(outcome.metrics, allow_nan=False)
        saver.save(row, pickle.dumps(outcome.model, protocol=5))
    except Exception as exc:
        return _failed(
            zone, f"could not save the model or metrics: {type(exc).__name__}: {exc}", rows, duration, cpu
        )
    return row


def _timed_call(call: ZoneCall, clock: ZoneClock | None, index: int) -> tuple[Any, dict]:
    if clock is None:
        return _checked(call())
    clock.start(index)
    try:
        result = call()
    finally:
        clock.stop()
    return _checked(result)


def _checked(result: Any) -> tuple[Any, dict[str, Any]]:
    if not isinstance(result, tuple) or len(result) != 2:
        raise TypeError(f"a trainer must return (model, metrics), got {type(result).__name__}")
    return result[0], clean_metrics(result[1])


def _failed(zone: ZoneWork, error: str, rows: int, duration: float, cpu: float) -> dict[str, Any]:
    return manifest_row(
        zone.key,
        "failed",
        error=error[:_ERROR_CHARS],
        rows=rows,
        attempt=zone.attempt,
        duration_s=duration,
        cpu_s=cpu,
    )


def _describe(exc: Exception, zone: str, attempt: int, tries: int) -> str:
    global _tracebacks_logged
    if _tracebacks_logged < _MAX_LOGGED_TRACEBACKS:
        _tracebacks_logged += 1
        log.warning("zone %s failed (try %d of %d)", zone, attempt, tries, exc_info=exc)
    suffix = f" (after {tries} tries)" if tries > 1 else ""
    return f"{type(exc).__name__}: {exc}{suffix}"

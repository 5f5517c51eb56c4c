"""Cheap checks before the evaluation starts any heavy work.

Reads each Parquet footer once (row counts and the read plan come from the same metadata) and a few
hundred rows of the first row group, and loads each model once on the driver, so a wrong column name,
an empty dataset, an unreadable model or a model without ``predict_proba`` fails in seconds with a
message saying what to fix, before any block is scored. The loaded models are kept: the in-process
engine scores with them and the Ray engine ships them to its actors through the object store.

A run does its preflight on a thread (:class:`PreflightRun`) while a private Ray starts (a running
cluster is connected to after preflight and the driver's first block, :func:`~.engine.run_engine`);
the engine choice waits only for the row count (known once the footers are read).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError, DataError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.phases import PhaseClock
    from airflow_ray_provider.workloads.evaluation.scoring import LoadedModel

log = logging.getLogger(__name__)
SAMPLE_ROWS = 256


@dataclass
class Preflight:
    """What the checks found: row count, feature columns, columns to read, models, read units.

    :param models: identity of each model (``uri``, ``loader``, ``sha256``) for ``metrics.json``.
    :param loaded: each model as loaded for the checks (reused for scoring, never loaded twice).
    :param dataset_bytes: the size of the dataset's files.
    :param pass_bytes: the stored bytes one pass over ``read_columns`` reads (column chunks of every unit).
    """

    rows: int
    features: tuple[str, ...]
    read_columns: list[str]
    has_proba: dict[str, bool]
    models: dict[str, dict[str, Any]]
    units: list[dict[str, Any]]
    loaded: dict[str, LoadedModel] = field(default_factory=dict, repr=False)
    dataset_bytes: int = 0
    pass_bytes: int = 0


@dataclass(frozen=True)
class InputShape:
    """What preflight knows early (from the footers): the rows and the read units of the input."""

    rows: int
    blocks: int


class PreflightRun:
    """:func:`run_preflight` on a thread: :meth:`shape` as soon as the footers are read, :meth:`result` at
    the end. Preflight's error is raised by whichever is asked first (and by both).

    :param clock: receives the ``preflight`` mark when the checks are done.
    """

    def __init__(self, cfg: EvalConfig, clock: PhaseClock) -> None:
        self._shape: concurrent.futures.Future[InputShape] = concurrent.futures.Future()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "eval-preflight")
        self._result = self._pool.submit(self._run, cfg, clock)

    def _run(self, cfg: EvalConfig, clock: PhaseClock) -> Preflight:
        try:
            pre = run_preflight(cfg, on_shape=self._shape.set_result)
        except BaseException as exc:
            if not self._shape.done():
                self._shape.set_exception(exc)
            raise
        clock.mark("preflight")
        return pre

    def shape(self) -> InputShape:
        """The input's rows and blocks (waits for the footers)."""
        return self._shape.result()

    def result(self) -> Preflight:
        """Everything preflight found (waits for the checks)."""
        return self._result.result()

    def close(self) -> None:
        """Wait for the thread (a run that failed elsewhere does not leave it behind)."""
        self._pool.shutdown(wait=True)


def open_dataset(uri: str) -> pads.Dataset:
    """Open a Parquet file, folder or hive-partitioned dataset.

    :raises DataError: when nothing readable is there.
    """
    import pyarrow.dataset as pads

    fs, path = artifacts.resolve(uri)
    try:
        dataset = pads.dataset(path, filesystem=fs, format="parquet", partitioning="hive")
    except artifacts.pa_errors() as exc:  # a missing path is an OSError too
        raise DataError(
            f"cannot open the evaluation data {uri!r}: {exc}. Check data_uri (a Parquet file or folder)"
        ) from exc
    if not dataset.files:  # else reported as the label column missing from an empty schema
        raise DataError(
            f"the evaluation data {uri!r} is a folder with no Parquet files: check data_uri and the "
            f"upstream export"
        )
    return dataset


def run_preflight(cfg: EvalConfig, *, on_shape: Callable[[InputShape], None] | None = None) -> Preflight:
    """Validate data, columns, models and the output location against ``cfg``.

    :param on_shape: called with the input's :class:`InputShape` once the footers are read.

    :raises ConfigError | DataError | ArtifactError: with the problem and the fix.
    """
    from airflow_ray_provider.workloads.evaluation.block import features_of, labels_of
    from airflow_ray_provider.workloads.evaluation.scoring import (
        check_model_for_metrics,
        check_scores_for_metrics,
        load_model,
        score,
    )
    from airflow_ray_provider.workloads.evaluation.source import chunk_bytes, plan_units

    try:
        artifacts.probe_writable(cfg.output_uri)  # leaves nothing behind
    except ArtifactError as exc:
        raise ArtifactError(f"output_uri: {exc}") from exc
    dataset = open_dataset(cfg.data_uri)
    features = _check_columns(cfg, dataset.schema.names)
    footers: list[tuple[str, Any]] = []
    units = plan_units(dataset, cfg.scoring.block_rows, footers)  # every footer read once, here
    rows = sum(int(u["rows"]) for u in units)
    if rows == 0:
        raise DataError(
            f"the evaluation data {cfg.data_uri!r} has no rows: check data_uri and the upstream export"
        )
    read_columns = list(
        dict.fromkeys(
            [c for c in (cfg.columns.label, cfg.columns.group, *cfg.columns.slices) if c] + list(features)
        )
    )
    if on_shape is not None:
        on_shape(InputShape(rows, len(units)))
    _check_whole_input(cfg, units, footers)
    metadata = dict(footers)
    pass_bytes = sum(chunk_bytes(metadata[u["path"]], u["row_groups"], read_columns) for u in units)
    sample = _sample(cfg, units, read_columns)
    labels_of(sample, cfg.columns.label)
    x = features_of(sample, features)
    has_proba, models, loaded = {}, {}, {}
    for spec in cfg.models:
        loaded[spec.name] = model = load_model(spec)
        check_model_for_metrics(model, cfg.metrics)
        try:
            sample_scores = score(model, x, len(x), features)
        except DataError:
            raise
        except Exception as exc:
            raise DataError(
                f"model {spec.name!r} cannot score the data ({type(exc).__name__}: {exc}): "
                f"check columns.features "
                f"(now {list(features)}) against the features the model was trained on"
            ) from exc
        check_scores_for_metrics(model, sample_scores, cfg.metrics)
        has_proba[spec.name] = model.has_proba
        models[spec.name] = {
            "uri": spec.uri or spec.factory,
            "loader": spec.loader,
            "sha256": model.sha256,
            "score_method": model.method,
        }
    log.info(
        "preflight ok: %d rows, %d blocks, %d features, models %s",
        rows,
        len(units),
        len(features),
        list(models),
    )
    return Preflight(
        rows,
        features,
        read_columns,
        has_proba,
        models,
        units,
        loaded,
        dataset_bytes=_dataset_bytes(cfg.data_uri, dataset.files),
        pass_bytes=pass_bytes,
    )


def _dataset_bytes(uri: str, files: list[str]) -> int:
    fs, _ = artifacts.resolve(uri)
    return sum(int(info.size or 0) for info in fs.get_file_info(files))


def _check_whole_input(cfg: EvalConfig, units: list[dict[str, Any]], footers: list[tuple[str, Any]]) -> None:
    """Label nulls and range from every footer, and groups stored together (see :mod:`~.layout`)."""
    from airflow_ray_provider.workloads.evaluation.layout import (
        check_groups_together,
        check_labels,
        read_footer,
    )

    check_labels(cfg, read_footer(footers, cfg.columns.label))
    check_groups_together(cfg, units)


def _sample(cfg: EvalConfig, units: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    """Up to :data:`SAMPLE_ROWS` rows of the first non-empty unit's first row group (nothing else read)."""
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    first = next(u for u in units if u["rows"])
    table = read_unit({**first, "row_groups": first["row_groups"][:1]}, cfg.data_uri, columns)
    if table.num_rows == 0:  # an empty leading row group: the unit has rows further on
        table = read_unit(first, cfg.data_uri, columns)
    return table.slice(0, SAMPLE_ROWS)


def _check_columns(cfg: EvalConfig, available: list[str]) -> tuple[str, ...]:
    cols = cfg.columns
    wanted = {"columns.label": [cols.label], "columns.group": [cols.group] if cols.group else []}
    wanted["columns.slices"] = list(cols.slices)
    wanted["columns.features"] = list(cols.features)
    for key, names in wanted.items():
        missing = [n for n in names if n not in available]
        if missing:
            raise DataError(
                f"{key} names column(s) {missing} that the data at {cfg.data_uri!r} does not have; "
                f"available columns: {available}"
            )
    if cols.features:
        return cols.features
    used = {cols.label, cols.group, *cols.slices}
    features = tuple(n for n in available if n not in used)
    if not features:
        raise DataError("no feature columns left: list the model inputs in columns.features")
    return features

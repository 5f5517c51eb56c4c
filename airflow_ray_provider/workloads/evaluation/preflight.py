"""Cheap checks before the evaluation starts any heavy work.

Reads only Parquet metadata and a few hundred rows, and loads each model once on the driver, so a
wrong column name, an empty dataset, an unreadable model or a model without ``predict_proba`` fails in
seconds with a message saying what to fix, before the actor pool starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError, DataError

if TYPE_CHECKING:
    import pyarrow.dataset as pads

    from airflow_ray_provider.workloads.evaluation.config import EvalConfig

log = logging.getLogger(__name__)
SAMPLE_ROWS = 256


@dataclass
class Preflight:
    """What the checks found: row count, feature columns, columns to read, model identities."""

    rows: int
    features: tuple[str, ...]
    read_columns: list[str]
    has_proba: dict[str, bool]
    models: dict[str, dict[str, Any]]
    units: list[dict[str, Any]]


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


def run_preflight(cfg: EvalConfig) -> Preflight:
    """Validate data, columns, models and the output location against ``cfg``.

    :raises ConfigError | DataError | ArtifactError: with the problem and the fix.
    """
    from airflow_ray_provider.workloads.evaluation.block import features_of, labels_of
    from airflow_ray_provider.workloads.evaluation.scoring import check_model_for_metrics, load_model, score
    from airflow_ray_provider.workloads.evaluation.source import plan_units

    try:
        artifacts.probe_writable(cfg.output_uri)  # leaves nothing behind
    except ArtifactError as exc:
        raise ArtifactError(f"output_uri: {exc}") from exc
    dataset = open_dataset(cfg.data_uri)
    features = _check_columns(cfg, dataset.schema.names)
    rows = dataset.count_rows()
    if rows == 0:
        raise DataError(
            f"the evaluation data {cfg.data_uri!r} has no rows: check data_uri and the upstream export"
        )
    read_columns = list(
        dict.fromkeys(
            [c for c in (cfg.columns.label, cfg.columns.group, *cfg.columns.slices) if c] + list(features)
        )
    )
    sample = dataset.head(min(SAMPLE_ROWS, rows), columns=read_columns)
    labels_of(sample, cfg.columns.label)
    x = features_of(sample, features)
    has_proba, models = {}, {}
    for spec in cfg.models:
        loaded = load_model(spec)
        check_model_for_metrics(loaded, cfg.needs_probabilities, cfg.metrics)
        try:
            score(loaded, x, len(x))
        except Exception as exc:
            raise DataError(
                f"model {spec.name!r} cannot score the data ({type(exc).__name__}: {exc}): "
                f"check columns.features "
                f"(now {list(features)}) against the features the model was trained on"
            ) from exc
        has_proba[spec.name] = loaded.has_proba
        models[spec.name] = {"uri": spec.uri or spec.factory, "loader": spec.loader, "sha256": loaded.sha256}
    units = plan_units(dataset, cfg.scoring.block_rows)
    log.info(
        "preflight ok: %d rows, %d blocks, %d features, models %s",
        rows,
        len(units),
        len(features),
        list(models),
    )
    return Preflight(rows, features, read_columns, has_proba, models, units)


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

"""The evaluation artifact: ``metrics.json``, ``slices.parquet``, ``predictions/``, then ``_SUCCESS``.

The layout is the cross-area contract (schema_version 1) read by the templates (``templates.collect``).
Files are written atomically and the ``_SUCCESS`` marker last; a stale marker is removed first, so a
reader never takes a half-written artifact for a complete one. Predictions are written to a staging
folder while the job runs and moved into place only once every metric is computed.
"""

from __future__ import annotations

import math
import posixpath
import uuid
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_ray_provider.workloads.evaluation.aggregate import EvalResult
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig

SCHEMA_VERSION = 1
METRICS_FILE = "metrics.json"
SLICES_FILE = "slices.parquet"
PREDICTIONS_DIR = "predictions"


def clean_floats(obj: Any) -> Any:
    """Replace NaN/inf by None, recursively (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_floats(v) for v in obj]
    return obj


def build_document(
    cfg: EvalConfig,
    result: EvalResult,
    *,
    models: dict[str, dict[str, Any]],
    directions: dict[str, str],
    run: dict[str, Any],
) -> dict[str, Any]:
    """The ``metrics.json`` document (see ``/notes/contracts.md``)."""
    return clean_floats(
        {
            "schema_version": SCHEMA_VERSION,
            "kind": "evaluation",
            "run": run,
            "data": {
                "uri": cfg.data_uri,
                "rows": result.rows,
                "groups": result.groups,
                "label_column": cfg.columns.label,
                "group_column": cfg.columns.group,
                "slice_columns": list(cfg.columns.slices),
            },
            "models": models,
            "baseline": cfg.baseline,
            "metric_directions": directions,
            "metrics": result.overall,
            "deltas": result.deltas,
            "bootstrap": {
                "samples": cfg.bootstrap.samples,
                "seed": cfg.bootstrap.seed,
                "confidence": cfg.bootstrap.confidence,
                "unit": "group" if cfg.columns.group else "row",
                "buckets": cfg.bootstrap.buckets,
            },
            "slices": {"columns": list(cfg.columns.slices), "rows": result.slice_rows},
            "artifacts": {
                "slices": SLICES_FILE,
                "predictions": PREDICTIONS_DIR if cfg.write_predictions else None,
            },
        }
    )


def slices_table(result: EvalResult, metric_names: list[str]) -> pa.Table:
    """``slices.parquet``: one row per (slice, model) with ``slice``, ``model``, ``rows`` and every metric."""
    import pyarrow as pa

    rows = result.slice_rows
    columns: dict[str, pa.Array] = {
        "slice": pa.array([r["slice"] for r in rows], type=pa.string()),
        "model": pa.array([r["model"] for r in rows], type=pa.string()),
        "rows": pa.array([r["rows"] for r in rows], type=pa.int64()),
    }
    for name in metric_names:
        columns[name] = pa.array([clean_floats(r.get(name)) for r in rows], type=pa.float64())
    return pa.table(columns)


def staging_uri(output_uri: str) -> str:
    """A fresh staging folder inside the output location (for predictions written during the run)."""
    return artifacts.join(output_uri, f"_staging-{uuid.uuid4().hex[:12]}")


def discard(uri: str) -> None:
    """Delete a folder if it exists (best effort, for staging folders)."""
    fs, path = artifacts.resolve(uri)
    try:
        if fs.get_file_info(path).type.name != "NotFound":
            fs.delete_dir(path)
    except artifacts.pa_errors():
        pass


def _move_dir(src_uri: str, dest_uri: str) -> None:
    fs, src = artifacts.resolve(src_uri)
    _, dest = artifacts.resolve(dest_uri)
    if fs.get_file_info(dest).type.name != "NotFound":
        fs.delete_dir(dest)
    if artifacts.is_local(fs):
        fs.move(src, dest)
        return
    import pyarrow.fs as pafs

    fs.create_dir(dest, recursive=True)
    for info in fs.get_file_info(pafs.FileSelector(src, recursive=True)):
        if info.type == pafs.FileType.File:
            fs.copy_file(info.path, posixpath.join(dest, posixpath.relpath(info.path, src)))
    fs.delete_dir(src)


def write_artifact(
    output_uri: str, document: dict[str, Any], slices: pa.Table, staged_predictions: str | None
) -> None:
    """Write the whole artifact; ``_SUCCESS`` last, after removing a stale one."""
    artifacts.clear_completion(output_uri)
    if staged_predictions is not None and artifacts.exists(staged_predictions):
        _move_dir(staged_predictions, artifacts.join(output_uri, PREDICTIONS_DIR))
    artifacts.write_parquet_atomic(artifacts.join(output_uri, SLICES_FILE), slices)
    artifacts.write_json_atomic(artifacts.join(output_uri, METRICS_FILE), document)
    artifacts.mark_complete(output_uri)

"""The zone-training artifact: model paths, ``manifest.parquet`` and ``summary.json`` (contracts.md).

Layout under ``output_uri``: ``models/`` (per zone ``<zone>.joblib``, pickle protocol 5, the zone
percent-encoded in the file name when it holds characters such as ``/``; or per task a bundle
``part-<run>-<task>.joblib``, see :mod:`.bundles`), ``manifest.parquet`` (each zone's ``artifact``
file and, for a bundle, its ``artifact_key``), ``summary.json``, then ``_SUCCESS`` last. Load models
with :mod:`.loading`, which reads both layouts.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError, ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

MANIFEST_NAME = "manifest.parquet"
SUMMARY_NAME = "summary.json"
MODELS_DIR = "models"
SCHEMA_VERSION = 1
# Columns of contracts.md, then ``cpu_s`` (CPU seconds spent in the trainer, for utilisation figures)
# and ``artifact_key`` (the zone's key in a bundle file; null for a file of its own).
COLUMNS = ("application", "zone", "status", "error", "rows", "duration_s", "metrics", "artifact", "attempt")
EXTRA_COLUMNS = ("cpu_s", "artifact_key")
MAX_LISTED_FAILURES = 100
STATUSES = ("succeeded", "failed")
_BUNDLE_NAME = re.compile(r"part-[0-9a-f]{12}-\d{5,}(-\d+)?\.joblib")


def manifest_row(
    zone: str,
    status: str,
    *,
    rows: int,
    attempt: int,
    error: str | None = None,
    duration_s: float = 0.0,
    cpu_s: float = 0.0,
    metrics: str | None = "{}",
    artifact: str | None = None,
    artifact_key: str | None = None,
) -> dict[str, Any]:
    """The one way a zone's manifest row is made (succeeded or failed; every column but ``application``).

    A plain mapping, since a bundled zone's row gets its ``artifact`` when the bundle is written.

    :param status: ``succeeded`` or ``failed``; a failed row carries ``error`` and no artifact.
    :param metrics: the trainer's metrics as JSON (``"{}"`` for a failed zone).
    :raises ValueError: on an unknown status, or a failed row without an error.
    """
    if status not in STATUSES:
        raise ValueError(f"manifest status must be one of {STATUSES}, got {status!r}")
    if status == "failed" and not error:
        raise ValueError(f"a failed zone's manifest row needs its error (zone {zone!r})")
    return {
        "zone": zone,
        "status": status,
        "error": error,
        "rows": rows,
        "duration_s": duration_s,
        "cpu_s": cpu_s,
        "metrics": metrics,
        "artifact": artifact,
        "artifact_key": artifact_key,
        "attempt": attempt,
    }


def manifest_schema() -> pa.Schema:
    """Arrow schema of ``manifest.parquet``."""
    import pyarrow as pa

    return pa.schema(
        [
            ("application", pa.string()),
            ("zone", pa.string()),
            ("status", pa.string()),
            ("error", pa.string()),
            ("rows", pa.int64()),
            ("duration_s", pa.float64()),
            ("metrics", pa.string()),
            ("artifact", pa.string()),
            ("attempt", pa.int64()),
            ("cpu_s", pa.float64()),
            ("artifact_key", pa.string()),
        ]
    )


def model_file_name(zone: str) -> str:
    """File name of a zone's model: the zone percent-encoded (``/`` and friends), never hidden or empty."""
    name = urllib.parse.quote(zone, safe="=@,+")
    if not name or name.startswith("."):
        name = "%2E" + name[1:] if name else "%"
    return f"{name}.joblib"


def model_uri(models_uri: str, zone: str) -> str:
    """Where the model of ``zone`` goes."""
    return artifacts.join(models_uri, model_file_name(zone))


def build_table(application: str, rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Manifest table from result rows, sorted by zone."""
    import pyarrow as pa

    ordered = sorted(rows, key=lambda r: r["zone"])
    data = {name: [r.get(name) for r in ordered] for name in (*COLUMNS, *EXTRA_COLUMNS)}
    data["application"] = [application] * len(ordered)
    data["cpu_s"] = [r.get("cpu_s") or 0.0 for r in ordered]
    return pa.table(data, schema=manifest_schema())


def read_manifest(uri: str) -> list[dict[str, Any]]:
    """Read a manifest written by this workload.

    :raises ConfigError: when it is missing, unreadable or lacks the manifest columns.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(artifacts.read_bytes(uri)))
    except artifacts.pa_errors(ArtifactError) as exc:
        raise ConfigError(f"--only-failed manifest {uri!r} cannot be read: {exc}") from exc
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ConfigError(
            f"--only-failed {uri!r} is not a zone-training manifest (missing columns {missing})"
        )
    rows = table.to_pylist()
    for row in rows:  # manifests written before bundles existed lack the column
        row.setdefault("artifact_key", None)
    return rows


def failed_zones(previous: Sequence[dict[str, Any]], application: str, uri: str) -> list[str]:
    """Zones that failed in ``previous``, after checking it belongs to ``application``.

    :raises ConfigError: the manifest is of another application.
    """
    apps = sorted({str(r["application"]) for r in previous})
    if apps and apps != [application]:
        raise ConfigError(
            f"--only-failed manifest {uri!r} belongs to application {apps}, not {application!r}; "
            "pass the manifest of this application's previous run"
        )
    return sorted(r["zone"] for r in previous if r["status"] != "succeeded")


def merge(previous: Sequence[dict[str, Any]], new_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Previous rows with the retrained zones replaced by their new results."""
    by_zone = {r["zone"]: r for r in previous}
    by_zone.update({r["zone"]: r for r in new_rows})
    return list(by_zone.values())


def build_summary(
    *,
    application: str,
    rows: Sequence[dict[str, Any]],
    max_failed_fraction: float,
    output_uri: str,
    run: dict[str, Any],
    duration_s: float,
) -> dict[str, Any]:
    """``summary.json`` content (schema_version 1) plus ``threshold_exceeded``."""
    failed = sorted(r["zone"] for r in rows if r["status"] != "succeeded")
    total = len(rows)
    fraction = len(failed) / total if total else 0.0
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "zone_training",
        "application": application,
        "zones_total": total,
        "succeeded": total - len(failed),
        "failed": len(failed),
        "failed_fraction": fraction,
        "max_failed_fraction": max_failed_fraction,
        "threshold_exceeded": fraction > max_failed_fraction,
        "duration_s": duration_s,
        "manifest": artifacts.join(output_uri, MANIFEST_NAME),
        "models": artifacts.join(output_uri, MODELS_DIR) + "/",
        "failed_zones": failed[:MAX_LISTED_FAILURES],
        "run": run,
    }


def write_artifact(output_uri: str, application: str, rows: Sequence[dict[str, Any]], summary: dict) -> None:
    """Write the manifest and the summary, then ``_SUCCESS`` (the models are already written).

    Bundle files in ``models/`` that the manifest does not reference (an earlier run's, or of a task
    that was cancelled and rerun) are removed once the manifest is in place.
    """
    artifacts.write_parquet_atomic(artifacts.join(output_uri, MANIFEST_NAME), build_table(application, rows))
    prune_bundles(artifacts.join(output_uri, MODELS_DIR), {r["artifact"] for r in rows if r.get("artifact")})
    artifacts.write_json_atomic(artifacts.join(output_uri, SUMMARY_NAME), summary)
    artifacts.mark_complete(output_uri)


def prune_bundles(models_uri: str, referenced: set[str]) -> list[str]:
    """Delete bundle files (``part-<run>-<task>*.joblib``) under ``models_uri`` not in ``referenced``.

    :returns: the URIs deleted.
    """
    import pyarrow.fs as pafs

    fs, path = artifacts.resolve(models_uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except artifacts.pa_errors() as exc:
        raise ArtifactError(f"could not list {models_uri!r}: {exc}") from exc
    # Compared as resolved paths: the same folder may be spelled differently (relative, absolute) by
    # the run that wrote a bundle and the --only-failed run that still references it.
    kept = {posixpath.normpath(artifacts.resolve(uri)[1]) for uri in referenced if uri and uri != "None"}
    deleted = []
    for info in infos:
        uri = artifacts.join(models_uri, info.base_name)
        stale = _BUNDLE_NAME.fullmatch(info.base_name) and posixpath.normpath(info.path) not in kept
        if info.type == pafs.FileType.File and stale:
            try:
                fs.delete_file(info.path)
            except artifacts.pa_errors() as exc:
                raise ArtifactError(f"could not remove the stale bundle {uri!r}: {exc}") from exc
            deleted.append(uri)
    return deleted

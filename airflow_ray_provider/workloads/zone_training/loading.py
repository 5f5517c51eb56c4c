"""Loading trained zone models from a run's output, whatever the layout (one file per zone or bundles).

::

    from airflow_ray_provider.workloads.zone_training import load_zone_model, load_zone_models

    model = load_zone_model("s3://models/ctr/2026-12-01", "NYC/Manhattan")
    models = load_zone_models("s3://models/ctr/2026-12-01")            # every succeeded zone
    some = load_zone_models("s3://models/ctr/2026-12-01", ["z1", "z2"])

Both read ``manifest.parquet`` (only a complete output, ``_SUCCESS`` present) and open each model
file once: the bulk loader groups zones by file, so a bundle is read once for all its zones. Models
are unpickled: load only outputs you trust, as with any pickle.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError
from airflow_ray_provider.workloads.zone_training.bundles import bundle_models
from airflow_ray_provider.workloads.zone_training.manifest import MANIFEST_NAME


def load_zone_model(output_uri: str, zone: str) -> Any:
    """The model trained for ``zone`` in the run written to ``output_uri``.

    :param output_uri: the run's ``output_uri`` (holding ``manifest.parquet``).
    :param zone: the zone key as in the manifest (the zone column's value as a string).
    :raises KeyError: the zone is not in the manifest or has no model (its training failed).
    :raises ArtifactError: the output is incomplete or a model file is missing or unreadable.
    """
    return load_zone_models(output_uri, [zone])[zone]


def load_zone_models(output_uri: str, zones: Iterable[str] | None = None) -> dict[str, Any]:
    """Models of ``zones`` (default: every zone that succeeded) as ``{zone: model}``.

    :param output_uri: the run's ``output_uri``.
    :param zones: zone keys to load; every one must have a model.
    :raises KeyError: a requested zone is not in the manifest or has no model.
    :raises ArtifactError: the output is incomplete or a model file is missing or unreadable.
    """
    rows = _manifest_rows(output_uri)
    if zones is None:
        wanted = [z for z, r in rows.items() if r["status"] == "succeeded" and r["artifact"]]
    else:
        wanted = list(zones)
        for zone in wanted:
            _check_loadable(rows, zone, output_uri)
    by_file: dict[str, list[str]] = {}
    for zone in wanted:
        by_file.setdefault(rows[zone]["artifact"], []).append(zone)
    models: dict[str, Any] = {}
    for uri, file_zones in by_file.items():
        data = artifacts.read_bytes(uri)
        keys = [rows[z].get("artifact_key") for z in file_zones]
        if all(k is None for k in keys):
            model = _unpickle(data, uri)
            models.update(dict.fromkeys(file_zones, model))
            continue
        bundle = _bundle(data, uri)
        for zone, key in zip(file_zones, keys, strict=True):
            if key not in bundle:
                raise ArtifactError(f"model bundle {uri!r} holds no model for zone {zone!r} (key {key!r})")
            models[zone] = _unpickle(bundle[key], uri)
    return models


def _manifest_rows(output_uri: str) -> dict[str, dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not artifacts.is_complete(output_uri):
        raise ArtifactError(
            f"{output_uri!r} holds no complete zone-training output (no _SUCCESS marker): the run is "
            "still going, failed before its manifest, or the path is wrong"
        )
    manifest = artifacts.join(output_uri, MANIFEST_NAME)
    try:
        table = pq.read_table(pa.BufferReader(artifacts.read_bytes(manifest)))
    except artifacts.pa_errors() as exc:
        raise ArtifactError(f"zone manifest {manifest!r} cannot be read: {exc}") from exc
    rows = table.to_pylist()
    for row in rows:
        row.setdefault("artifact_key", None)
    return {row["zone"]: row for row in rows}


def _check_loadable(rows: dict[str, dict[str, Any]], zone: str, output_uri: str) -> None:
    row = rows.get(zone)
    if row is None:
        raise KeyError(f"zone {zone!r} is not in the manifest of {output_uri!r}")
    if row["status"] != "succeeded" or not row["artifact"]:
        raise KeyError(f"zone {zone!r} has no model in {output_uri!r}: {row['status']}: {row['error']}")


def _bundle(data: bytes, uri: str) -> dict[str, bytes]:
    try:
        return bundle_models(data, uri)
    except (pickle.UnpicklingError, ValueError, EOFError) as exc:
        raise ArtifactError(f"model bundle {uri!r} is corrupt or not a bundle: {exc}") from exc


def _unpickle(data: bytes, uri: str) -> Any:
    try:
        return pickle.loads(data)
    except (pickle.UnpicklingError, EOFError) as exc:
        raise ArtifactError(f"model file {uri!r} is corrupt: {exc}") from exc

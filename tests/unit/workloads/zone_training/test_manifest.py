"""Zone-training artifact: file names, manifest schema, --only-failed selection, merge and summary."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.zone_training.manifest import (
    COLUMNS,
    build_summary,
    build_table,
    failed_zones,
    merge,
    model_file_name,
    read_manifest,
    write_artifact,
)

pytestmark = pytest.mark.unit


def row(zone: str, status: str = "succeeded", attempt: int = 1) -> dict:
    return {
        "zone": zone,
        "status": status,
        "error": None if status == "succeeded" else "boom",
        "rows": 10,
        "duration_s": 0.1,
        "cpu_s": 0.1,
        "metrics": "{}",
        "artifact": f"/m/{zone}.joblib" if status == "succeeded" else None,
        "attempt": attempt,
    }


@pytest.mark.parametrize(
    ("zone", "name"),
    [
        ("z1", "z1.joblib"),
        ("NYC/Manhattan", "NYC%2FManhattan.joblib"),
        ("..", "%2E..joblib"),
        ("", "%.joblib"),
    ],
)
def test_model_file_names_are_safe_and_distinct(zone: str, name: str) -> None:
    assert model_file_name(zone) == name
    assert "/" not in model_file_name(zone)


def test_manifest_has_the_contract_columns_sorted_by_zone(tmp_path) -> None:
    out = str(tmp_path / "out")
    rows = [row("b", "failed"), row("a")]
    summary = build_summary(
        application="app", rows=rows, max_failed_fraction=0.0, output_uri=out, run={}, duration_s=1.0
    )
    write_artifact(out, "app", rows, summary)
    table = pq.read_table(f"{out}/manifest.parquet")
    assert table.column_names[: len(COLUMNS)] == list(COLUMNS)
    assert table.column("zone").to_pylist() == ["a", "b"]
    assert table.column("application").to_pylist() == ["app", "app"]
    assert table.schema.field("rows").type == pa.int64()
    assert artifacts.is_complete(out)
    saved = artifacts.read_json(f"{out}/summary.json")
    assert saved["failed_zones"] == ["b"] and saved["failed_fraction"] == 0.5 and saved["threshold_exceeded"]
    assert saved["manifest"] == f"{out}/manifest.parquet" and saved["kind"] == "zone_training"


def test_only_failed_selects_failures_and_rejects_another_application() -> None:
    previous = [row("a"), row("b", "failed"), row("c", "failed")]
    for r in previous:
        r["application"] = "app"
    assert failed_zones(previous, "app", "m.parquet") == ["b", "c"]
    with pytest.raises(ConfigError, match="belongs to application \\['app'\\], not 'other'"):
        failed_zones(previous, "other", "m.parquet")


def test_merge_replaces_retrained_zones_only() -> None:
    merged = {r["zone"]: r for r in merge([row("a"), row("b", "failed")], [row("b", attempt=2)])}
    assert (
        merged["a"]["attempt"] == 1 and merged["b"]["status"] == "succeeded" and merged["b"]["attempt"] == 2
    )


def test_read_manifest_rejects_other_parquet_and_missing_files(tmp_path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(ConfigError, match="is not a zone-training manifest"):
        read_manifest(str(tmp_path / "other.parquet"))
    with pytest.raises(ConfigError, match="cannot be read"):
        read_manifest(str(tmp_path / "missing.parquet"))
    table = build_table("app", [row("a")])
    pq.write_table(table, tmp_path / "m.parquet")
    assert read_manifest(str(tmp_path / "m.parquet"))[0]["application"] == "app"
    assert pickle.loads(pickle.dumps(table.schema)) == table.schema

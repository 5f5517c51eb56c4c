"""The sample zone-dataset generator: sizes, determinism, both layouts, CLI."""

from __future__ import annotations

import os

import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.samples.zones import main, make_zone_dataset

pytestmark = pytest.mark.unit


def test_file_layout_is_shuffled_deterministic_and_sized(tmp_path) -> None:
    first = make_zone_dataset(str(tmp_path / "a.parquet"), 5, (10, 20), features=3, seed=4)
    again = make_zone_dataset(str(tmp_path / "b.parquet"), 5, (10, 20), features=3, seed=4)
    table = pq.read_table(first)
    assert table.equals(pq.read_table(again))
    assert table.column_names == ["zone", "y", "f0", "f1", "f2"]
    counts = {c["values"]: c["counts"] for c in table.column("zone").value_counts().to_pylist()}
    assert sorted(counts) == [f"z{i:05d}" for i in range(5)] and all(10 <= n <= 20 for n in counts.values())
    assert table.column("zone").to_pylist() != sorted(table.column("zone").to_pylist())  # shuffled


def test_partitioned_layout_and_cli(tmp_path, capsys) -> None:
    uri = make_zone_dataset(str(tmp_path / "parts"), 3, 7, features=2, seed=0, partitioned=True)
    assert sorted(os.listdir(uri)) == ["zone=z00000", "zone=z00001", "zone=z00002"]
    assert pads.dataset(uri, partitioning="hive").count_rows() == 21
    out = str(tmp_path / "cli")
    assert main([out, "--zones", "2", "--rows-per-zone", "4", "--classification"]) == 0
    printed = capsys.readouterr().out.strip()
    labels = pq.read_table(printed).column("y").to_pylist()
    assert printed == f"{out}/part-0.parquet" and len(labels) == 8 and set(labels) <= {0, 1}

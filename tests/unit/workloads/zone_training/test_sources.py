"""Which chunk objects a batch task gets, and where each zone's rows are in them (no Ray needed)."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from airflow_ray_provider.workloads.zone_training.batching import ZoneItem
from airflow_ray_provider.workloads.zone_training.dataset import DatasetPlan
from airflow_ray_provider.workloads.zone_training.scheduler import ZoneSources
from airflow_ray_provider.workloads.zone_training.staging import StagedData

pytestmark = pytest.mark.unit


def sources(
    pieces: dict[str, list[tuple[int, int, int]]], attempts: dict[str, int] | None = None
) -> ZoneSources:
    plan = DatasetPlan(
        uri="data.parquet",
        fs=pafs.LocalFileSystem(),
        zone_column="zone",
        label_column="y",
        feature_columns=["f0"],
        zone_rows={k: sum(p[2] for p in v) for k, v in pieces.items()},
        file_columns=["zone", "y", "f0"],
    )
    staged = StagedData(chunk_refs=["ref0", "ref1", "ref2", "ref3"], pieces=pieces)
    return ZoneSources(plan, staged, attempts or {})


def test_chunk_arguments_come_in_chunk_order_whatever_the_zones_order() -> None:
    pieces = {"a": [(3, 0, 5), (1, 10, 2)], "b": [(2, 4, 4)], "c": [(1, 0, 10), (3, 5, 1)]}
    batch = [ZoneItem("a", 7), ZoneItem("b", 4), ZoneItem("c", 11)]
    works, refs = sources(pieces).works(batch)
    assert refs == ["ref1", "ref2", "ref3"]  # the same dependencies, in the same order, for every task
    arg = {"ref1": 0, "ref2": 1, "ref3": 2}
    assert works[0].pieces == ((arg["ref3"], 0, 5), (arg["ref1"], 10, 2))
    assert works[1].pieces == ((arg["ref2"], 4, 4),)
    assert works[2].pieces == ((arg["ref1"], 0, 10), (arg["ref3"], 5, 1))
    _, reversed_refs = sources(pieces).works(list(reversed(batch)))
    assert reversed_refs == refs


def test_work_items_carry_rows_and_the_manifest_attempt() -> None:
    pieces = {"a": [(0, 0, 3)], "b": [(0, 3, 2)]}
    works, refs = sources(pieces, attempts={"b": 3}).works([ZoneItem("a", 3), ZoneItem("b", 2)])
    assert refs == ["ref0"]
    assert [(w.key, w.rows, w.attempt) for w in works] == [("a", 3, 1), ("b", 2, 3)]


def test_zone_pieces_list_each_zones_runs_in_chunk_order() -> None:
    from airflow_ray_provider.workloads.zone_training.staging import zone_pieces

    indexes = [{"a": (0, 3), "b": (3, 2)}, {"b": (0, 4)}, {"a": (0, 1), "c": (1, 5)}]
    assert zone_pieces(indexes) == {
        "a": [(0, 0, 3), (2, 0, 1)],
        "b": [(0, 3, 2), (1, 0, 4)],
        "c": [(2, 1, 5)],
    }

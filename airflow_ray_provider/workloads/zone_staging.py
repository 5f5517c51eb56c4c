"""Staging a dataset that is not partitioned by zone: read it once, in Ray tasks, into the object store.

Each staging task reads one chunk (a few row groups of one file), sorts it by zone and returns two
objects: the sorted label and feature columns (they stay in the object store; the zone column is
dropped, the index replaces it) and a small index ``zone -> (start, length)``.
The driver fetches only the indexes; training tasks get the chunk tables as task arguments (zero-copy
on the node) and slice their zones out. The data is read once and stored once, never per zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from airflow_ray_provider.workloads.zone_dataset import ChunkSpec, DatasetPlan

Piece = tuple[int, int, int]
"""Where some of a zone's rows are: (chunk number, first row, row count)."""


@dataclass
class StagedData:
    """Chunk tables in the object store and, per zone, the pieces that hold its rows."""

    chunk_refs: list[Any]
    pieces: dict[str, list[Piece]]


def stage_chunk(
    fs: pafs.FileSystem, spec: ChunkSpec, file_columns: list[str], columns: list[str], zone_column: str
) -> tuple[pa.Table, dict[str, tuple[int, int]]]:
    """Read one chunk, sort it by zone, and index each zone's run of rows (runs inside a Ray task)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with fs.open_input_file(spec.path) as src:
        table = pq.ParquetFile(src).read_row_groups(list(spec.row_groups), columns=file_columns)
    for name, value in spec.partition_values.items():
        if name in columns and name not in table.column_names:
            table = table.append_column(name, pa.array([value] * table.num_rows))
    table = table.select(columns).sort_by(zone_column)
    runs = pc.run_end_encode(table.column(zone_column).combine_chunks())
    index: dict[str, tuple[int, int]] = {}
    start = 0
    for value, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        index[str(value)] = (start, end - start)
        start = end
    return table.drop_columns([zone_column]).combine_chunks(), index


def stage_dataset(plan: DatasetPlan) -> StagedData:
    """Run one staging task per chunk and collect the zone indexes (one ``ray.get`` for all)."""
    import ray

    task = ray.remote(num_cpus=1, max_retries=3)(stage_chunk).options(num_returns=2)
    pairs = [
        task.remote(plan.fs, spec, plan.file_columns, plan.columns, plan.zone_column) for spec in plan.chunks
    ]
    indexes = ray.get([index_ref for _, index_ref in pairs])
    pieces: dict[str, list[Piece]] = {}
    for chunk_no, index in enumerate(indexes):
        for key, (start, length) in index.items():
            pieces.setdefault(key, []).append((chunk_no, start, length))
    return StagedData(chunk_refs=[table_ref for table_ref, _ in pairs], pieces=pieces)

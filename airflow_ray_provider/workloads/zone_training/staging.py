"""Staging a dataset that is not partitioned by zone: read it once, in Ray tasks, into the object store.

Each staging task reads one chunk (a few row groups of one file), groups it by zone and returns two
objects: the sorted label and feature columns (they stay in the object store; the zone column is
dropped, the index replaces it) and a small index ``zone -> (start, length)``.
The driver fetches only the indexes; training tasks get the chunk tables as task arguments (zero-copy
on the node) and slice their zones out. The data is read once and stored once, never per zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs
    from ray import ObjectRef

    from airflow_ray_provider.workloads.zone_training.dataset import ChunkSpec, DatasetPlan

Piece = tuple[int, int, int]
"""Where some of a zone's rows are: (chunk number, first row, row count)."""


@dataclass
class StagedData:
    """Chunk tables and, per zone, the pieces that hold its rows.

    :param chunk_refs: per chunk, what a task gets it from: an object ref (Ray) or the chunk number
        of its file (the local engine).
    """

    chunk_refs: list[Any]
    pieces: dict[str, list[Piece]]


def stage_chunk(
    fs: pafs.FileSystem, spec: ChunkSpec, file_columns: list[str], columns: list[str], zone_column: str
) -> tuple[pa.Table, dict[str, tuple[int, int]]]:
    """Read one chunk, group its rows by zone, and index each zone's run of rows (runs in a Ray task)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with fs.open_input_file(spec.path) as src:
        table = pq.ParquetFile(src).read_row_groups(list(spec.row_groups), columns=file_columns)
    for name, value in spec.partition_values.items():
        if name in columns and name not in table.column_names:
            table = table.append_column(name, pa.array([value] * table.num_rows))
    # Group rows by zone: a stable argsort of the zone's dictionary codes (about twice as fast as
    # sorting the strings themselves), then one take.
    encoded = pc.dictionary_encode(table.column(zone_column)).combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(encoded.dictionary))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    index = {
        str(value): (int(start), int(count))
        for value, start, count in zip(encoded.dictionary.to_pylist(), starts, counts, strict=True)
        if count
    }
    return table.select([c for c in columns if c != zone_column]).take(order).combine_chunks(), index


def stage_dataset(plan: DatasetPlan) -> StagedData:
    """Run one staging task per chunk and collect the zone indexes (one ``ray.get`` for all)."""
    import ray

    task = ray.remote(num_cpus=1, max_retries=3)(stage_chunk).options(num_returns=2)
    # With num_returns=2 a call returns one ref per returned value; Ray's stubs type it as a single ref.
    pairs = [
        cast(
            "list[ObjectRef[Any]]",
            task.remote(plan.fs, spec, plan.file_columns, plan.columns, plan.zone_column),
        )
        for spec in plan.chunks
    ]
    indexes = ray.get([index_ref for _, index_ref in pairs])
    return StagedData(chunk_refs=[table_ref for table_ref, _ in pairs], pieces=zone_pieces(indexes))


def zone_pieces(indexes: list[dict[str, tuple[int, int]]]) -> dict[str, list[Piece]]:
    """Per zone, its runs of rows in every chunk, from the chunks' indexes (in chunk order)."""
    pieces: dict[str, list[Piece]] = {}
    for chunk_no, index in enumerate(indexes):
        for key, (start, length) in index.items():
            pieces.setdefault(key, []).append((chunk_no, start, length))
    return pieces

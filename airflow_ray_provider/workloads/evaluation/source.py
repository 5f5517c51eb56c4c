"""Reading the evaluation log as blocks that are contiguous row ranges of one Parquet file.

Ray Data's generic Parquet reader may concatenate row groups of different files (or out of order) into
one block. NDCG and the group bootstrap need the rows of a request together, so the evaluation plans its
own read units instead: runs of consecutive row groups of one file, about ``block_rows`` rows each. A
group can then only be split at a unit's first or last row, which the block code handles exactly.
Units also make block boundaries deterministic, which keeps recomputation after a node loss identical.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_ray_provider.workloads.common import artifacts

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq


def plan_units(
    dataset: pads.Dataset, block_rows: int, footers: list[tuple[str, pq.FileMetaData]] | None = None
) -> list[dict[str, Any]]:
    """Read units: ``{"path", "row_groups", "rows", "partition"}``, in file order.

    :param dataset: an opened (possibly hive-partitioned) Parquet dataset.
    :param block_rows: target rows per unit (whole row groups; a big row group is one unit).
    :param footers: if given, receives ``(path, metadata)`` of each file (footers are read once).
    """
    import pyarrow.dataset as pads

    units: list[dict[str, Any]] = []
    for fragment in dataset.get_fragments():
        partition = {k: _plain(v) for k, v in pads.get_partition_keys(fragment.partition_expression).items()}
        meta = fragment.metadata
        if footers is not None:
            footers.append((fragment.path, meta))
        current: list[int] = []
        rows = 0
        for rg in range(meta.num_row_groups):
            current.append(rg)
            rows += meta.row_group(rg).num_rows
            if rows >= block_rows:
                units.append(
                    {"path": fragment.path, "row_groups": current, "rows": rows, "partition": partition}
                )
                current, rows = [], 0
        if current and rows:
            units.append({"path": fragment.path, "row_groups": current, "rows": rows, "partition": partition})
    return units


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def read_unit(unit: dict[str, Any], data_uri: str, columns: list[str]) -> pa.Table:
    """Read one unit's row groups (only ``columns``), adding hive partition columns as constants."""
    return read_unit_counted(unit, data_uri, columns)[0]


def chunk_bytes(meta: pq.FileMetaData, row_groups: list[int], columns: list[str]) -> int:
    """Stored (compressed) bytes of ``columns``' chunks in ``row_groups``: what reading them fetches."""
    wanted = set(columns)
    total = 0
    for rg in row_groups:
        group = meta.row_group(rg)
        for i in range(group.num_columns):
            chunk = group.column(i)
            if chunk.path_in_schema.split(".")[0] in wanted:
                total += int(chunk.total_compressed_size)
    return total


def read_unit_counted(unit: dict[str, Any], data_uri: str, columns: list[str]) -> tuple[pa.Table, int]:
    """:func:`read_unit`, and the stored bytes it read (:func:`chunk_bytes`; footers not counted)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, _ = artifacts.resolve(data_uri)
    with fs.open_input_file(unit["path"]) as handle:
        # pre_buffer: the wanted column chunks in a few coalesced, concurrent range reads; without it an
        # object store gets one request per column chunk, one after another (benchmarks/object_store.md).
        pf = pq.ParquetFile(handle, pre_buffer=True)
        present = [c for c in columns if c in pf.schema_arrow.names]
        table = pf.read_row_groups(unit["row_groups"], columns=present)
        nbytes = chunk_bytes(pf.metadata, unit["row_groups"], present)
    for name in columns:
        if name not in table.column_names and name in unit["partition"]:
            value = unit["partition"][name]
            table = table.append_column(name, pa.array([value] * table.num_rows))
    return table.select(columns), nbytes

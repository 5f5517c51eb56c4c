"""A training task's rows as one pandas DataFrame (or, for array trainers, NumPy arrays), zone after zone.

A task gets its zones' rows as slices of Arrow tables (staged chunks, or a partitioned dataset's
files); on shuffled data each zone has a slice in every chunk. For a model that fits in about a
millisecond, turning those slices into a DataFrame is a noticeable share of the task:
``concat_tables(slices).to_pandas()`` cost about 100 µs a zone here (2,000 rows x 11 columns from 4
chunks), while copying plain numeric columns slice by slice straight into one 2-D block per dtype, the
layout pandas keeps, costs about a third of that. Columns that are not plain numbers without nulls
(strings, booleans, decimals, timestamps, integers with nulls ...) go through Arrow's own conversion,
so their pandas dtypes are what ``Table.to_pandas()`` gives.

Array trainers get :func:`segments_arrays` instead: one float64 (rows x features) array, column-major,
and the label array for the whole batch, copied slice by slice once; each zone then gets views of its rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

Segment = tuple["pa.Table", int, int]
"""Some rows of the batch: (table, first row, row count)."""


def segments_frame(segments: Sequence[Segment], columns: Sequence[str]) -> pd.DataFrame:
    """The rows of ``segments``, in order, as one DataFrame with ``columns`` and a 0-based index.

    :raises ValueError: no rows.
    :raises KeyError: a column missing from a table.
    """
    import pandas as pd
    import pyarrow as pa

    total = sum(rows for _, _, rows in segments)
    if total == 0:
        raise ValueError("the batch has no rows")
    tables = _distinct_tables(segments)
    groups: dict[Any, list[str]] = {}
    arrow_columns: list[str] = []
    for name in columns:
        dtype = _plain_numeric_dtype(tables, name)
        if dtype is None:
            arrow_columns.append(name)
        else:
            groups.setdefault(dtype, []).append(name)
    parts = [_numeric_block(segments, names, dtype, total) for dtype, names in groups.items()]
    if arrow_columns:
        pieces = [t.select(arrow_columns).slice(start, rows) for t, start, rows in segments]
        parts.append(pa.concat_tables(pieces, promote_options="permissive").to_pandas())
    frame = parts[0] if len(parts) == 1 else pd.concat(parts, axis=1)
    if list(frame.columns) != list(columns):
        frame = frame[list(columns)]
    return frame


def _distinct_tables(segments: Sequence[Segment]) -> list[pa.Table]:
    seen: dict[int, pa.Table] = {}
    for table, _, _ in segments:
        seen.setdefault(id(table), table)
    return list(seen.values())


def _plain_numeric_dtype(tables: Sequence[pa.Table], name: str) -> np.dtype | None:
    """The NumPy dtype of column ``name`` in every table when it is integers or floats without nulls."""
    import numpy as np
    import pyarrow as pa

    dtype = None
    for table in tables:
        column = table.column(name)
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)) or column.null_count:
            return None
        this = np.dtype(kind.to_pandas_dtype())
        if dtype is not None and this != dtype:
            return None
        dtype = this
    return dtype


def _numeric_block(segments: Sequence[Segment], names: list[str], dtype: Any, total: int) -> pd.DataFrame:
    """Columns ``names`` (one dtype) copied slice by slice into one (columns x rows) block."""
    import numpy as np
    import pandas as pd

    block = np.empty((len(names), total), dtype=dtype)
    views: dict[int, list[np.ndarray]] = {}
    pos = 0
    for table, start, rows in segments:
        arrays = views.get(id(table))
        if arrays is None:
            arrays = views[id(table)] = [_column_array(table, name) for name in names]
        for i, array in enumerate(arrays):
            block[i, pos : pos + rows] = array[start : start + rows]
        pos += rows
    # block.T is the (rows x columns) view pandas stores as this very block: no copy.
    return pd.DataFrame(block.T, columns=names, copy=False)


def _column_array(table: pa.Table, name: str) -> np.ndarray:
    """The whole column as one NumPy array (zero-copy when it is a single chunk)."""
    import numpy as np

    column = table.column(name)
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy(zero_copy_only=True)
    if column.num_chunks == 0:
        return np.empty(0, dtype=column.type.to_pandas_dtype())
    return column.combine_chunks().to_numpy(zero_copy_only=True)


def segments_arrays(
    segments: Sequence[Segment], label: str, features: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``segments``, in order: features as a float64 (rows x features) array, and the labels.

    The feature array is column-major (a transposed view of one (features x rows) block).

    Nulls in a feature become NaN; the labels are the label column's NumPy conversion (its dtype).

    :raises ValueError: no rows.
    :raises KeyError: a column missing from a table.
    """
    import numpy as np

    total = sum(rows for _, _, rows in segments)
    if total == 0:
        raise ValueError("the batch has no rows")
    # Column-major: each slice's copy is contiguous (about half the cost of writing every column
    # strided into a row-major block), and each column is one ``concatenate`` of its slices into its
    # row of the block (a third less than one slice assignment per column and slice here). A zone's
    # rows are then a strided view; the built-in trainers index it with a row mask, which yields the
    # same C-ordered values as from a row-major block.
    columns_block = np.empty((len(features), total), dtype=np.float64)
    slices: list[list[np.ndarray]] = [[] for _ in features]
    label_parts: list[np.ndarray] = []
    views: dict[int, tuple[list[np.ndarray], np.ndarray | None]] = {}
    for table, start, rows in segments:
        cached = views.get(id(table))
        if cached is None:
            cached = views[id(table)] = (
                [_numeric_array(table, name) for name in features],
                _label_array(table, label),
            )
        columns, labels = cached
        end = start + rows
        for column_slices, array in zip(slices, columns, strict=True):
            column_slices.append(array[start:end])
        if labels is not None:
            label_parts.append(labels[start:end])
        else:
            label_parts.append(table.column(label).slice(start, rows).to_numpy())
    for row, column_slices in zip(columns_block, slices, strict=True):
        np.concatenate(column_slices, out=row, casting="unsafe")
    y = label_parts[0] if len(label_parts) == 1 else np.concatenate(label_parts)
    return columns_block.T, y


def _numeric_array(table: pa.Table, name: str) -> np.ndarray:
    """A whole numeric column as NumPy (zero-copy without nulls; nulls as NaN otherwise)."""
    import pyarrow as pa

    column = table.column(name)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise TypeError(f"feature column {name!r} is {kind}, not numeric: array trainers need numbers")
    if column.null_count == 0 and not pa.types.is_boolean(kind):
        return _column_array(table, name)
    return column.combine_chunks().to_numpy(zero_copy_only=False)


def _label_array(table: pa.Table, name: str) -> np.ndarray | None:
    """The whole label column as NumPy when that is zero-copy (plain numbers); else ``None`` (slice it)."""
    import pyarrow as pa

    column = table.column(name)
    kind = column.type
    if column.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return _column_array(table, name)
    return None

"""Checks of the whole input before any scoring: Parquet footer statistics, and where each group is stored.

The preflight sample sees a few hundred rows; these checks see every row group:

* **footer statistics** (no data read): null counts of the label column, and its min/max (a label
  outside [0, 1] anywhere in the data fails here, not in the middle of scoring);
* **groups stored together**: NDCG and the group bootstrap need each group's rows consecutive. Footer
  min/max cannot show where a group lies (two files may span the same range and share no group, and
  a row group's rows need not be sorted), so the group column alone is read and checked exactly with
  the rule the merge applies after scoring: a group complete inside one read unit appears nowhere
  else; a group may continue only from the end of one unit into the start of another. One column's
  read and 8 bytes per group, instead of finding the split after every row was scored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_ray_provider.workloads.common.errors import DataError
from airflow_ray_provider.workloads.evaluation import ranking

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from airflow_ray_provider.workloads.evaluation.config import EvalConfig


@dataclass
class ColumnFooter:
    """One column's footer statistics over the row groups that have them.

    :param nulls: nulls counted by the footers (row groups without a null count add none).
    :param has_range: whether every row group had min/max (``low``/``high`` are then the column's).
    """

    nulls: int = 0
    low: Any = None
    high: Any = None
    has_range: bool = True

    def add(self, stats: Any) -> None:
        """Fold in one row group's ``pyarrow.parquet.Statistics`` (or ``None``)."""
        if stats is not None and stats.has_null_count:
            self.nulls += int(stats.null_count)
        if stats is None or not stats.has_min_max:
            self.has_range = False
            return
        lo, hi = stats.min, stats.max
        try:
            self.low = lo if self.low is None or lo < self.low else self.low
            self.high = hi if self.high is None or hi > self.high else self.high
        except TypeError:  # values of mixed types cannot be ordered: no range
            self.has_range = False


def read_footer(fragment_meta: list[tuple[str, pq.FileMetaData]], name: str) -> ColumnFooter:
    """Footer statistics of column ``name`` from each file's already-read metadata.

    :param fragment_meta: ``(path, metadata)`` per file, in dataset order.
    """
    footer = ColumnFooter()
    for _, meta in fragment_meta:
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if name not in names:  # a hive partition column: constant per file, read with the sample
            footer.has_range = False
            continue
        index = names.index(name)
        for rg in range(meta.num_row_groups):
            footer.add(meta.row_group(rg).column(index).statistics)
    return footer


def check_labels(cfg: EvalConfig, footer: ColumnFooter) -> None:
    """Nulls and values outside [0, 1] in the label column, anywhere in the data.

    :raises DataError: naming ``columns.label``.
    """
    column = cfg.columns.label
    if footer.nulls:
        raise DataError(
            f"columns.label: label column {column!r} has {footer.nulls} null values in {cfg.data_uri!r} "
            "(Parquet footer statistics): drop or fill them"
        )
    numeric = isinstance(footer.low, int | float) and isinstance(footer.high, int | float)
    if footer.has_range and numeric and (footer.low < 0 or footer.high > 1):
        raise DataError(
            f"columns.label: label column {column!r} must hold 0/1 for binary metrics; the data at "
            f"{cfg.data_uri!r} ranges from {footer.low} to {footer.high} (Parquet footer statistics): "
            "binarise the label (e.g. clicked = clicks > 0) or point columns.label at the right column"
        )


def check_groups_together(cfg: EvalConfig, units: list[dict[str, Any]]) -> None:
    """Refuse data whose groups are split other than across read-unit edges (the merge's own rule).

    Reads the group column alone, unit by unit, keeping 8 bytes per group.

    :param units: the read units (see :mod:`~.source`), in dataset order.
    :raises DataError: naming ``columns.group`` and the files that hold the split group.
    """
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    group = cfg.columns.group
    if group is None:
        return
    inner_keys, edge_keys = [], []
    for i, unit in enumerate(units):
        if not unit["rows"]:
            continue
        run_keys = _run_keys(
            read_unit(unit, cfg.data_uri, [group]).column(group).to_numpy(zero_copy_only=False)
        )
        if len(run_keys) > 1 and run_keys[0] == run_keys[-1]:  # one group at both ends, another between
            _split(cfg, units, [i])
        inner_keys.append(run_keys[1:-1])
        edge_keys.append(np.unique(run_keys[[0, -1]]))
    inner = np.concatenate(inner_keys) if inner_keys else np.zeros(0, dtype=np.uint64)
    inner, twice = ranking.sort_with_repeats(inner)
    edges = np.concatenate(edge_keys) if edge_keys else inner[:0]
    touching = np.unique(edges[ranking.contains_sorted(inner, edges)])
    bad = np.concatenate([twice[:1], touching[:1]])
    if len(bad):
        _split(cfg, units, _units_holding(cfg, units, int(bad[0])))


def _run_keys(values: np.ndarray) -> np.ndarray:
    """The group hash of each run of equal consecutive group values."""
    keys = ranking.group_hash(values)
    return keys[ranking.run_starts(keys)]


def _units_holding(cfg: EvalConfig, units: list[dict[str, Any]], key: int) -> list[int]:
    """The units whose group column holds the group hashed to ``key`` (read again: only on failure)."""
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    group = cfg.columns.group or ""
    found = []
    for i, unit in enumerate(units):
        if (
            unit["rows"]
            and (
                _run_keys(read_unit(unit, cfg.data_uri, [group]).column(group).to_numpy(zero_copy_only=False))
                == key
            ).any()
        ):
            found.append(i)
    return found


def _split(cfg: EvalConfig, units: list[dict[str, Any]], holding: list[int]) -> None:
    where = sorted({os.path.basename(units[i]["path"]) for i in holding})
    raise DataError(
        f"columns.group: rows of a group ({cfg.columns.group!r}) are not stored together (one group is in "
        f"the middle of {' and of '.join(where) or 'the data'}, not only where one block ends and another "
        f"begins): NDCG and the group bootstrap need each group's rows consecutive in the files. Sort the "
        f"log by {cfg.columns.group!r} (e.g. ds.sort(...).write_parquet(...)) and rerun, or drop 'ndcg' "
        "and columns.group"
    )

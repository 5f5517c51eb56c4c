"""Driver-side look at the zone dataset: validation, zone -> row counts, and where each zone's rows are.

Only metadata and the zone column are read here (cheap); the feature data never passes through the
driver. The zone column is read dictionary-encoded (Parquet stores strings that way: no string is
materialised, the codes are counted; about 5x faster than reading the strings for
2M rows); for a dataset partitioned by zone, nothing but the files' footers is read (row counts).
Two layouts:

* **partitioned by zone** (hive ``<zone_column>=<value>/...parquet``): each training task reads its
  zones' files itself;
* **anything else** (one file, many files, partitioned by another key): the files' row groups are
  split into chunks that Ray tasks read, sort by zone and keep in the object store once
  (:mod:`airflow_ray_provider.workloads.zone_training.staging`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import DataError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig

CHUNK_ROWS = 512 * 1024


@dataclass(frozen=True)
class ChunkSpec:
    """Row groups of one Parquet file that one staging task reads.

    :param partition_values: hive partition columns of that file (constant over it).
    """

    path: str
    row_groups: tuple[int, ...]
    rows: int
    partition_values: dict[str, Any] = field(default_factory=dict)


@dataclass
class DatasetPlan:
    """What the driver knows about the dataset before training.

    :param zone_rows: zone key (``str`` of the value) -> row count, sorted by key.
    :param zone_files: for a dataset partitioned by zone: zone key -> its Parquet files.
    :param chunks: otherwise: the staging chunks covering every row.
    :param file_columns: the needed columns stored in the files (partition columns excluded).
    """

    uri: str
    fs: pafs.FileSystem
    zone_column: str
    label_column: str
    feature_columns: list[str]
    zone_rows: dict[str, int]
    file_columns: list[str]
    zone_files: dict[str, list[str]] | None = None
    chunks: list[ChunkSpec] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """Zone, label and feature columns, in the order handed to the trainer."""
        return [self.zone_column, self.label_column, *self.feature_columns]

    @property
    def partitioned_by_zone(self) -> bool:
        """Whether zones are hive partitions (tasks read files directly, no staging)."""
        return self.zone_files is not None


def inspect_dataset(cfg: ZoneTrainingConfig, *, numeric_features: bool) -> DatasetPlan:
    """Validate the dataset against the config and plan how tasks reach each zone's rows.

    A single Parquet file (outside hive folders) is read with ``pyarrow.parquet`` alone
    (:func:`_inspect_file`: the same checks and plan, without ``pyarrow.dataset``, which imports
    pandas: about 0.35 s of a short job's driver here); anything else with ``pyarrow.dataset`` (hive
    partitions, many files).

    :param numeric_features: require numeric feature columns (array trainers, the built-ins among
        them, need them).
    :raises DataError: missing path or columns, empty dataset, nulls in the zone column, bad features.
    """
    fs, path = artifacts.resolve(cfg.data_uri)
    if _plain_file(fs, path):
        return _inspect_file(cfg, fs, path, numeric_features)
    dataset = _open(cfg.data_uri, fs, path, cfg.zone_column)
    schema = dataset.schema
    features = _check_columns(cfg, schema, numeric_features)
    fragments = list(dataset.get_fragments())
    part_names = _partition_names(fragments)
    if cfg.zone_column in part_names:
        zone_rows = _partition_counts(fragments, cfg)
    else:
        zone_rows = _zone_counts(dataset, cfg)
    plan = DatasetPlan(
        uri=cfg.data_uri,
        fs=fs,
        zone_column=cfg.zone_column,
        label_column=cfg.label_column,
        feature_columns=features,
        zone_rows=zone_rows,
        file_columns=[c for c in [cfg.zone_column, cfg.label_column, *features] if c not in part_names],
    )
    if cfg.zone_column in part_names:
        plan.zone_files = _zone_files(fragments, cfg.zone_column)
    else:
        plan.chunks = _chunks(fragments, part_names)
    return plan


def _plain_file(fs: pafs.FileSystem, path: str) -> bool:
    """Whether ``path`` is one file outside hive folders (``pyarrow.dataset`` reads a ``key=value``
    folder of a file's path as a partition column; such a file, a directory or a missing path go
    through :func:`_open`)."""
    if any("=" in part for part in path.split("/")[:-1]):
        return False
    try:
        return bool(fs.get_file_info(path).type.name == "File")
    except artifacts.pa_errors(ValueError):
        return False


def _inspect_file(
    cfg: ZoneTrainingConfig, fs: pafs.FileSystem, path: str, numeric_features: bool
) -> DatasetPlan:
    """:func:`inspect_dataset` of one Parquet file: its footer, then its zone column, dictionary-encoded."""
    import pyarrow.parquet as pq

    try:
        with fs.open_input_file(path) as src:
            meta = pq.ParquetFile(src).metadata
            features = _check_columns(cfg, meta.schema.to_arrow_schema(), numeric_features)
            parquet = pq.ParquetFile(src, metadata=meta, read_dictionary=[cfg.zone_column])
            try:
                column = parquet.read(columns=[cfg.zone_column]).column(cfg.zone_column)
            except artifacts.pa_errors() as exc:
                raise DataError(
                    f"could not read column {cfg.zone_column!r} of {cfg.data_uri!r}: {exc}"
                ) from exc
    except artifacts.pa_errors(ValueError) as exc:
        raise DataError(f"data_uri {cfg.data_uri!r} is not a readable Parquet dataset: {exc}") from exc
    row_groups = [(i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    return DatasetPlan(
        uri=cfg.data_uri,
        fs=fs,
        zone_column=cfg.zone_column,
        label_column=cfg.label_column,
        feature_columns=features,
        zone_rows=_column_counts(column, cfg),
        file_columns=[cfg.zone_column, cfg.label_column, *features],
        chunks=_file_chunks(path, row_groups, {}),
    )


def _open(uri: str, fs: pafs.FileSystem, path: str, zone_column: str) -> pads.Dataset:
    """The dataset, with the zone column read dictionary-encoded (the only column read here)."""
    import pyarrow.dataset as pads

    fmt = pads.ParquetFileFormat(read_options=pads.ParquetReadOptions(dictionary_columns=[zone_column]))
    if not artifacts.exists(uri):
        raise DataError(f"data_uri {uri!r} does not exist; point it at a Parquet file or directory")
    try:
        return pads.dataset(path, filesystem=fs, format=fmt, partitioning="hive")
    except artifacts.pa_errors(ValueError) as exc:
        raise DataError(f"data_uri {uri!r} is not a readable Parquet dataset: {exc}") from exc


def _check_columns(cfg: ZoneTrainingConfig, schema: pa.Schema, numeric: bool) -> list[str]:
    import pyarrow.types as pat

    names = schema.names
    for role, col in (("zone_column", cfg.zone_column), ("label_column", cfg.label_column)):
        if col not in names:
            raise DataError(f"{role} {col!r} is not a column of {cfg.data_uri!r}; columns: {names}")
    features = cfg.feature_columns or [c for c in names if c not in (cfg.zone_column, cfg.label_column)]
    missing = [c for c in features if c not in names]
    if missing:
        raise DataError(f"feature_columns {missing} are not columns of {cfg.data_uri!r}; columns: {names}")
    if not features:
        raise DataError(f"{cfg.data_uri!r} has no feature columns besides the zone and label columns")
    if numeric:
        bad = [c for c in features if not (pat.is_integer(t := schema.field(c).type) or pat.is_floating(t))]
        bad += [c for c in features if pat.is_boolean(schema.field(c).type)]
        if bad:
            raise DataError(
                f"feature columns {sorted(set(bad))} are not numeric; the trainer {cfg.trainer!r} "
                "takes arrays and needs numbers: list numeric 'feature_columns' or use a DataFrame trainer"
            )
    return features


def _zone_counts(dataset: pads.Dataset, cfg: ZoneTrainingConfig) -> dict[str, int]:
    """Rows per zone from the zone column alone (dictionary codes counted, no strings built)."""
    try:
        column = dataset.to_table(columns=[cfg.zone_column]).column(cfg.zone_column)
    except artifacts.pa_errors() as exc:
        raise DataError(f"could not read column {cfg.zone_column!r} of {cfg.data_uri!r}: {exc}") from exc
    return _column_counts(column, cfg)


def _column_counts(column: pa.ChunkedArray, cfg: ZoneTrainingConfig) -> dict[str, int]:
    """Rows per zone of the zone column (checked: not empty, no nulls), sorted by key."""
    _check_zone_rows(cfg, len(column), column.null_count)
    out: dict[str, int] = {}
    for chunk in column.chunks:
        for value, count in _chunk_counts(chunk):
            key = str(value)
            out[key] = out.get(key, 0) + count
    return dict(sorted(out.items()))


def _chunk_counts(chunk: pa.Array) -> list[tuple[Any, int]]:
    """(value, rows) of one chunk of the zone column (no nulls): the dictionary codes counted.

    ``pyarrow.compute`` counts the codes (``to_numpy`` would import pandas: see :func:`inspect_dataset`).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(chunk, pa.DictionaryArray):
        pairs = pc.value_counts(chunk.indices)
        dictionary = chunk.dictionary.to_pylist()
        codes, counts = pairs.field("values").to_pylist(), pairs.field("counts").to_pylist()
        return [(dictionary[code], int(n)) for code, n in zip(codes, counts, strict=True) if n]
    pairs = pc.value_counts(chunk)
    return list(zip(pairs.field("values").to_pylist(), pairs.field("counts").to_pylist(), strict=True))


def _partition_counts(fragments: list[Any], cfg: ZoneTrainingConfig) -> dict[str, int]:
    """Rows per zone of a dataset partitioned by zone, from the files' footers (no column is read)."""
    import pyarrow.dataset as pads

    out: dict[str, int] = {}
    nulls = total = 0
    try:
        for frag in fragments:
            rows = frag.metadata.num_rows
            value = pads.get_partition_keys(frag.partition_expression).get(cfg.zone_column)
            total += rows
            if value is None:
                nulls += rows
            elif rows:
                out[str(value)] = out.get(str(value), 0) + rows
    except artifacts.pa_errors() as exc:
        raise DataError(f"could not read the Parquet footers of {cfg.data_uri!r}: {exc}") from exc
    _check_zone_rows(cfg, total, nulls)
    return dict(sorted(out.items()))


def _check_zone_rows(cfg: ZoneTrainingConfig, rows: int, nulls: int) -> None:
    if rows == 0:
        raise DataError(f"the dataset {cfg.data_uri!r} is empty (0 rows): nothing to train")
    if nulls:
        raise DataError(
            f"{nulls} of {rows} rows have a null zone in column {cfg.zone_column!r} "
            f"of {cfg.data_uri!r}; drop or fill them before training"
        )


def _partition_names(fragments: list[Any]) -> set[str]:
    """Hive keys (``key=value`` directories) that every file of the dataset has."""
    import pyarrow.dataset as pads

    keys = [set(pads.get_partition_keys(f.partition_expression)) for f in fragments]
    return set.intersection(*keys) if keys else set()


def _zone_files(fragments: list[Any], zone_column: str) -> dict[str, list[str]]:
    import pyarrow.dataset as pads

    files: dict[str, list[str]] = {}
    for frag in fragments:
        value = pads.get_partition_keys(frag.partition_expression).get(zone_column)
        files.setdefault(str(value), []).append(frag.path)
    return files


def _chunks(fragments: list[Any], part_names: set[str]) -> list[ChunkSpec]:
    import pyarrow.dataset as pads

    chunks: list[ChunkSpec] = []
    for frag in fragments:
        keys = pads.get_partition_keys(frag.partition_expression)
        values = {k: v for k, v in keys.items() if k in part_names}
        chunks.extend(_file_chunks(frag.path, _row_groups(frag), values))
    return chunks


def _file_chunks(path: str, row_groups: list[tuple[int, int]], values: dict[str, Any]) -> list[ChunkSpec]:
    """One file's row groups ``(number, rows)`` in chunks of about :data:`CHUNK_ROWS` rows, in order."""
    chunks: list[ChunkSpec] = []
    group: list[int] = []
    rows = 0
    for number, count in row_groups:
        group.append(number)
        rows += count
        if rows >= CHUNK_ROWS:
            chunks.append(ChunkSpec(path, tuple(group), rows, values))
            group, rows = [], 0
    if group:
        chunks.append(ChunkSpec(path, tuple(group), rows, values))
    return chunks


def _row_groups(frag: Any) -> list[tuple[int, int]]:
    meta = frag.metadata
    return [(i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]

"""Sample data for zone training: a synthetic regression (or binary) dataset with a ``zone`` column.

Each zone has its own true weights, so per-zone models really differ. Rows are shuffled across zones
(like real event data) unless the dataset is hive-partitioned by zone.

Usage::

    python -m airflow_ray_provider.workloads.samples.zones OUT --zones 1000 --rows-per-zone 2000 \\
        [--features 10] [--seed 0] [--partitioned] [--classification]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from airflow_ray_provider.workloads.common import artifacts

ZONE_COLUMN = "zone"
LABEL_COLUMN = "y"


def make_zone_dataset(
    path: str,
    zones: int,
    rows_per_zone: int | tuple[int, int],
    features: int = 10,
    seed: int = 0,
    partitioned: bool = False,
    *,
    classification: bool = False,
) -> str:
    """Write a synthetic zone dataset to ``path``; return the ``data_uri`` to put in the config.

    :param path: output file (``*.parquet``) or directory (local path or pyarrow.fs URI).
    :param zones: number of zones (``z00000``, ``z00001``, ...).
    :param rows_per_zone: rows of every zone, or ``(low, high)`` for sizes drawn uniformly.
    :param features: numeric feature columns ``f0``..``f{n-1}``.
    :param seed: random seed (same arguments, same data).
    :param partitioned: write hive partitions ``zone=<zone>/`` instead of one shuffled file.
    :param classification: make ``y`` a 0/1 label instead of a continuous target.
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    if isinstance(rows_per_zone, int):
        sizes = np.full(zones, rows_per_zone)
    else:
        sizes = rng.integers(rows_per_zone[0], rows_per_zone[1] + 1, size=zones)
    zone_idx = np.repeat(np.arange(zones), sizes)
    x = rng.normal(size=(len(zone_idx), features))
    weights = rng.normal(size=(zones, features))
    y = np.einsum("ij,ij->i", x, weights[zone_idx]) + rng.normal(scale=0.5, size=len(zone_idx))
    if classification:
        y = (y > 0).astype(np.int64)
    if not partitioned:
        order = rng.permutation(len(zone_idx))
        zone_idx, x, y = zone_idx[order], x[order], y[order]
    names = np.array([f"z{i:05d}" for i in range(zones)], dtype=object)
    columns = {ZONE_COLUMN: pa.array(names[zone_idx], pa.string()), LABEL_COLUMN: y}
    columns.update({f"f{j}": x[:, j] for j in range(features)})
    return _write(path, pa.table(columns), partitioned, zones)


def _write(path: str, table: object, partitioned: bool, zones: int) -> str:
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    fs, local = artifacts.resolve(path)
    if partitioned:
        pads.write_dataset(
            table,
            local,
            filesystem=fs,
            format="parquet",
            partitioning=[ZONE_COLUMN],
            partitioning_flavor="hive",
            max_partitions=zones + 1,
            existing_data_behavior="overwrite_or_ignore",
        )
        return path
    target = local if local.endswith(".parquet") else f"{local.rstrip('/')}/part-0.parquet"
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(target) as out:
        pq.write_table(table, out, row_group_size=256 * 1024)
    return path if path.endswith(".parquet") else artifacts.join(path, "part-0.parquet")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write a sample zone dataset and print its URI."""
    parser = argparse.ArgumentParser(prog="sample_zones", description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--zones", type=int, default=100)
    parser.add_argument("--rows-per-zone", type=int, default=1000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitioned", action="store_true")
    parser.add_argument("--classification", action="store_true")
    args = parser.parse_args(argv)
    uri = make_zone_dataset(
        args.path,
        args.zones,
        args.rows_per_zone,
        args.features,
        args.seed,
        args.partitioned,
        classification=args.classification,
    )
    print(uri)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Synthetic click log and two logistic-regression models for demos, templates, tests and benchmarks.

The log has ``request_id`` (groups of about ``group_size`` rows, stored together), ``zone`` (``z000`` ...),
features ``f0..f{n-1}`` and a 0/1 ``clicked`` label drawn from a known logistic model with a per-zone
offset. :func:`make_models` trains a *champion* (little data, strong regularisation) and a slightly better
*challenger* on fresh samples of the same distribution.

CLI::

    python -m airflow_ray_provider.workloads.samples.click_log --out /tmp/eval --rows 100000 [--partitioned]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

import numpy as np

LABEL, GROUP, ZONE = "clicked", "request_id", "zone"
CHUNK_ROWS = 1_000_000


def _true_weights(features: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 1_000_003).normal(0.0, 0.6, size=features)


def _zone_offsets(zones: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 2_000_003).normal(0.0, 0.4, size=zones)


def make_frame(
    rows: int, zones: int, features: int, group_size: int, seed: int, first_group: int = 0
) -> dict[str, np.ndarray]:
    """One chunk of the log as column arrays (groups are contiguous; a group is in one zone)."""
    rng = np.random.default_rng([seed, first_group])
    n_groups = 2 * max(1, -(-rows // group_size)) + 10
    sizes = np.clip(rng.poisson(group_size, n_groups), 1, None)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), rows) + 1]
    sizes[-1] -= int(sizes.sum()) - rows
    sizes = sizes[sizes > 0]
    group_ids = np.repeat(np.arange(first_group, first_group + len(sizes), dtype=np.int64), sizes)
    group_zone = rng.integers(0, zones, len(sizes))
    zone_idx = np.repeat(group_zone, sizes)
    x = rng.normal(size=(rows, features))
    logit = x @ _true_weights(features, seed) - 2.8 + _zone_offsets(zones, seed)[zone_idx]
    y = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int8)
    cols: dict[str, np.ndarray] = {
        GROUP: group_ids,
        ZONE: np.array([f"z{z:03d}" for z in range(zones)])[zone_idx],
    }
    cols.update({f"f{i}": x[:, i] for i in range(features)})
    cols[LABEL] = y
    return cols


def make_eval_dataset(
    path: str,
    rows: int,
    zones: int = 20,
    features: int = 16,
    group_size: int = 20,
    seed: int = 0,
    *,
    partitioned: bool = False,
    rows_per_file: int = CHUNK_ROWS,
    row_group_size: int = 128 * 1024,
) -> str:
    """Write the log as Parquet under ``path`` (a file per ``rows_per_file`` rows, or partitioned by zone).

    :returns: ``path``.
    """
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    first_group = 0
    for index, start in enumerate(range(0, rows, rows_per_file)):
        chunk = make_frame(min(rows_per_file, rows - start), zones, features, group_size, seed, first_group)
        first_group = int(chunk[GROUP][-1]) + 1
        table = pa.table(chunk)
        if partitioned:
            pads.write_dataset(
                table,
                path,
                format="parquet",
                partitioning=pads.partitioning(pa.schema([(ZONE, pa.string())]), flavor="hive"),
                basename_template=f"part-{index:05d}-{{i}}.parquet",
                existing_data_behavior="overwrite_or_ignore",
                max_rows_per_group=row_group_size,
            )
        else:
            pq.write_table(
                table, os.path.join(path, f"part-{index:05d}.parquet"), row_group_size=row_group_size
            )
    return path


def make_models(directory: str, seed: int = 0, features: int = 16, zones: int = 20) -> tuple[str, str]:
    """Train and save ``champion.joblib`` and ``challenger.joblib`` (the challenger slightly better).

    :returns: ``(champion_uri, challenger_uri)``.
    """
    import joblib
    from sklearn.linear_model import LogisticRegression

    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, rows, c_value, salt in (("champion", 1_500, 0.02, 11), ("challenger", 60_000, 1.0, 13)):
        frame = make_frame(rows, zones, features, 20, seed, first_group=10**9 + salt)
        x = np.column_stack([frame[f"f{i}"] for i in range(features)])
        model = LogisticRegression(C=c_value, max_iter=500).fit(x, frame[LABEL])
        out = os.path.join(directory, f"{name}.joblib")
        joblib.dump(model, out)
        paths.append(out)
    return paths[0], paths[1]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write ``<out>/data`` and ``<out>/models`` and print their URIs as JSON."""
    parser = argparse.ArgumentParser(prog="python -m airflow_ray_provider.workloads.samples.click_log")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--zones", type=int, default=20)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitioned", action="store_true", help="hive-partition the data by zone")
    args = parser.parse_args(argv)
    data = make_eval_dataset(
        os.path.join(args.out, "data"),
        args.rows,
        args.zones,
        args.features,
        args.group_size,
        args.seed,
        partitioned=args.partitioned,
    )
    champion, challenger = make_models(os.path.join(args.out, "models"), args.seed, args.features, args.zones)
    print(json.dumps({"data_uri": data, "champion_uri": champion, "challenger_uri": challenger}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sample data for the shipped DAGs, generated inside a Ray job (the DAGs' ``prepare`` step).

No Airflow imports: this runs on the Ray cluster. Idempotent: a partition or model that exists is kept.

CLI::

    python -m airflow_ray_provider.workloads.samples.prepare eval --root DIR --ds 2026-11-28 [--rows 100000]
    python -m airflow_ray_provider.workloads.samples.prepare zones --out DIR [--zones 40]
        [--rows-per-zone 400]

``eval`` writes ``<root>/logs/dt=<ds>/part-00000.parquet`` (one click-log partition per day, same
distribution every day, different rows) and ``<root>/models/{champion,challenger}.joblib``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import date

SEED, FEATURES, ZONES = 0, 16, 20


def partition_path(root: str, ds: str) -> str:
    """The folder of one day's log partition."""
    return os.path.join(root, "logs", f"dt={ds}")


def model_paths(root: str) -> tuple[str, str]:
    """``(champion, challenger)`` model files under ``root``."""
    return os.path.join(root, "models", "champion.joblib"), os.path.join(root, "models", "challenger.joblib")


def ensure_eval_data(root: str, ds: str, rows: int) -> dict[str, str]:
    """Write the day's partition and the two models unless they exist; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_ray_provider.workloads.samples.click_log import make_frame, make_models

    champion, challenger = model_paths(root)
    if not (os.path.exists(champion) and os.path.exists(challenger)):
        make_models(os.path.dirname(champion), SEED, FEATURES, ZONES)
    folder = partition_path(root, ds)
    target = os.path.join(folder, "part-00000.parquet")
    if not os.path.exists(target):
        day = date.fromisoformat(ds).toordinal()
        frame = make_frame(rows, ZONES, FEATURES, 20, SEED, first_group=day * 10_000_000)
        os.makedirs(folder, exist_ok=True)
        tmp = f"{target}.tmp"
        pq.write_table(pa.table(frame), tmp, row_group_size=64 * 1024)
        os.replace(tmp, target)
    return {"data_uri": folder, "champion_uri": champion, "challenger_uri": challenger}


def ensure_zone_data(out: str, zones: int, rows_per_zone: int, seed: int) -> str:
    """Write a zone-training dataset to ``out`` unless it exists; returns its data URI."""
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    if os.path.exists(out):
        return out
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    return make_zone_dataset(out, zones, rows_per_zone, seed=seed)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m airflow_ray_provider.workloads.samples.prepare")
    sub = parser.add_subparsers(dest="kind", required=True)
    ev = sub.add_parser("eval", help="a click-log partition and two models")
    ev.add_argument("--root", required=True)
    ev.add_argument("--ds", required=True, help="partition date, YYYY-MM-DD")
    ev.add_argument("--rows", type=int, default=100_000)
    zo = sub.add_parser("zones", help="a zone-training dataset")
    zo.add_argument("--out", required=True, help="Parquet file to write, e.g. DIR/zones.parquet")
    zo.add_argument("--zones", type=int, default=40)
    zo.add_argument("--rows-per-zone", type=int, default=400)
    zo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.kind == "eval":
        result = ensure_eval_data(args.root, args.ds, args.rows)
    else:
        result = {"data_uri": ensure_zone_data(args.out, args.zones, args.rows_per_zone, args.seed)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

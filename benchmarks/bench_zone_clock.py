"""Per-zone CPU cost of ``zone_timeout_s`` inside one task, no Ray: ``run_batch`` over small Ridge zones.

Run: ``python -m benchmarks.bench_zone_clock MODE [--zones 2000] [--rows 50]`` with ``MODE`` one of
``none`` (no ``zone_timeout_s``), ``armed`` (``zone_timeout_s: 60`` and no clock: what a tree whose
tasks enforce the limit themselves does), ``shared`` (the local engine's shared-memory clock) or
``reporting`` (the Ray worker's clock and its watching thread). Prints the best of five passes' CPU
microseconds per zone of this process (its threads included). To compare with another checkout, run the
file (``python benchmarks/bench_zone_clock.py``, not ``-m``, so that the current folder does not come
first) with that checkout on ``PYTHONPATH``; the modes and trees should take turns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from airflow_ray_provider.workloads.zone_training.worker import WorkerContext, ZoneWork, run_batch

PASSES = 5


def main(argv: list[str] | None = None) -> int:
    """Time ``run_batch`` in one mode and print the CPU per zone."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("none", "armed", "shared", "reporting"))
    parser.add_argument("--zones", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=50)
    args = parser.parse_args(argv)
    zones, rows = args.zones, args.rows
    features = np.random.default_rng(0).normal(size=(zones * rows, 2))
    table = pa.table({"y": 2 * features[:, 0] + features[:, 1], "f0": features[:, 0], "f1": features[:, 1]})
    works = [ZoneWork(f"z{i:05d}", rows, ((0, i * rows, rows),)) for i in range(zones)]
    models = tempfile.mkdtemp(prefix="zclock", dir="/dev/shm")
    ctx = WorkerContext(
        fs=pafs.LocalFileSystem(),
        zone_column="zone",
        label_column="y",
        feature_columns=["f0", "f1"],
        file_columns=["zone", "y", "f0", "f1"],
        models_uri=models,
        trainer="ridge",
        artifacts="bundled",
        zone_timeout_s=None if args.mode == "none" else 60.0,
    )
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, models, ignore_errors=True)
        kwargs = {}
        if args.mode == "shared":
            from airflow_ray_provider.workloads.zone_training.timeouts import SharedZoneClock

            kwargs["clock"] = SharedZoneClock(multiprocessing.get_context("forkserver").RawArray("d", 2))
        elif args.mode == "reporting":
            from airflow_ray_provider.workloads.zone_training.timeouts import ReportingZoneClock

            kwargs["clock"] = stack.enter_context(ReportingZoneClock(60.0, lambda index: None))
        run_batch(ctx, works[:200], [table], task_key=0, **kwargs)  # warm-up: imports, caches
        best = float("inf")
        for n in range(PASSES):
            started = time.process_time()
            out = run_batch(ctx, works, [table], task_key=n + 1, **kwargs)
            best = min(best, time.process_time() - started)
    assert all(row["status"] == "succeeded" for row in out["results"])
    print(json.dumps({"mode": args.mode, "zones": zones, "cpu_us_per_zone": round(best / zones * 1e6, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

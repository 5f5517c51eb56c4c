"""What ``zone_timeout_s`` costs, two code trees side by side: armed and never reached, and one zone past it.

Run: ``python -m benchmarks.bench_zone_timeout --tree old=DIR --tree new=DIR [--zones 1000] [--rows 2000]
[--repeats 2] [--engines local,ray]``; figures go to stdout and ``benchmarks/out/zone_timeout.json``
with ``uptime`` before and after.

Each run is the standalone CLI (``python -m airflow_ray_provider.workloads.zone_training``) as a whole
process with ``PYTHONPATH=<tree>``, on the same Parquet file (Ridge, bundled models, as
``bench_zone_e2e``), timed from the outside. Cases, per engine (``local``: worker processes; ``ray``: a
private Ray):

* ``none``: no ``zone_timeout_s`` (the trees should not differ);
* ``armed``: ``zone_timeout_s: 60``, never reached: the per-zone bookkeeping alone;
* ``one_slow``: ``zone_timeout_s: 2`` and one zone whose trainer loops in Python for 60 s
  (``tests.fixtures.zone_training:zone_slow_trainer``, a DataFrame trainer: every zone pays a
  DataFrame slice, so compare it only with itself): what stopping one zone costs.

The trees and cases alternate run by run, so load changes hit both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.bench_private_ray import uptime
from benchmarks.bench_zone_e2e import zone_config

OUT_DIR = os.path.join(os.path.dirname(__file__), "out")
SLOW_TRAINER = "tests.fixtures.zone_training:zone_slow_trainer"


def case_config(case: str, engine: str, data: str, out: str, zones: int) -> dict[str, Any]:
    """The CLI's config for ``case`` on ``engine`` (the slow zone: the middle one of ``zones``)."""
    cfg: dict[str, Any] = {**zone_config(data, out, engine), "max_failed_fraction": 1.0}
    if case == "armed":
        cfg["zone_timeout_s"] = 60
    elif case == "one_slow":
        cfg.update(
            zone_timeout_s=2, trainer=SLOW_TRAINER, trainer_kwargs={"slow_zones": [f"z{zones // 2:05d}"]}
        )
    return cfg


def run_case(tree: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """One whole CLI process on ``tree``: wall, and from ``summary.json`` the failures and phases."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = tree
    cmd = [
        sys.executable,
        "-m",
        "airflow_ray_provider.workloads.zone_training",
        "--config-json",
        json.dumps(cfg),
    ]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=900)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        return {"error": done.stderr[-1500:]}
    with open(os.path.join(cfg["output_uri"], "summary.json")) as f:
        summary = json.load(f)
    return {
        "wall_s": round(wall, 3),
        "duration_s": summary["duration_s"],
        "failed_zones": summary["failed_zones"],
        "timings_s": summary["run"]["timings_s"],
        "tasks": summary["run"]["tasks"].get("count"),
    }


def main(argv: list[str] | None = None) -> int:
    """Run every tree x engine x case ``--repeats`` times, alternating, and print/save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR (a checkout's root)")
    parser.add_argument("--zones", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--engines", default="local,ray")
    parser.add_argument("--cases", default="none,armed,one_slow")
    args = parser.parse_args(argv)
    trees = {name: os.path.abspath(path) for name, path in (t.split("=", 1) for t in args.tree)}
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    before = uptime()
    work = tempfile.mkdtemp(prefix="zt-", dir="/tmp")
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        data = make_zone_dataset(
            os.path.join(work, "zones.parquet"), args.zones, args.rows, features=10, seed=0
        )
        for i in range(args.repeats):
            for engine in args.engines.split(","):
                for case in args.cases.split(","):
                    for name, tree in trees.items():
                        out = os.path.join(work, f"{name}-{engine}-{case}-{i}")
                        result = run_case(tree, case_config(case, engine, data, out, args.zones))
                        runs.setdefault(f"{name}/{engine}/{case}", []).append(result)
                        print(
                            json.dumps({"tree": name, "engine": engine, "case": case, **result}), flush=True
                        )
                        shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {key: min((r["wall_s"] for r in rs if "wall_s" in r), default=None) for key, rs in runs.items()}
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "zones": args.zones,
        "rows_per_zone": args.rows,
        "uptime_before": before,
        "uptime_after": uptime(),
        "trees": trees,
        "best_wall_s": best,
        "runs": runs,
    }
    print(json.dumps(best, indent=2))
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "zone_timeout.json"), "w") as f:
        json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

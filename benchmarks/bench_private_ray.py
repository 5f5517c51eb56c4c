"""A standalone workload's private Ray: start, one task, stop, timed in whole processes, two code trees.

Run: ``python -m benchmarks.bench_private_ray --tree old=DIR --tree new=DIR [--repeats 5]``; figures go to
stdout and ``benchmarks/out/private_ray.json`` with ``uptime`` before and after.

Each run is a fresh interpreter with ``PYTHONPATH=<tree>`` (so it imports that tree's
``airflow_ray_provider``) and no ``RAY_*`` variables. It imports Ray and the session module, enters
:func:`~airflow_ray_provider.workloads.common.ray_session.ray_session` with no address (rule 5: a private
local Ray, as a standalone workload starts it), runs one task, leaves the session (``ray.shutdown``,
processes waited for, the private folder removed) and exits. Reported per run: the whole process's
wall from the outside, ``init_s`` (entering the session: ``ray.init``), ``task_s`` (the first task's
round trip: a worker starts) and ``shutdown_s`` (leaving the session). The trees alternate run by run,
so load changes hit both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

OUT_DIR = os.path.join(os.path.dirname(__file__), "out")

CHILD = r"""
import json, time
started = time.perf_counter()
import ray
from airflow_ray_provider.workloads.common.ray_session import ray_session
imported = time.perf_counter()

@ray.remote
def one():
    return 1

with ray_session() as session:
    inited = time.perf_counter()
    assert ray.get(one.remote()) == 1
    tasked = time.perf_counter()
closed = time.perf_counter()
print(json.dumps({"import_s": imported - started, "init_s": inited - imported, "task_s": tasked - inited,
                  "shutdown_s": closed - tasked, "mode": session.mode.value}))
"""


def run_once(tree: str) -> dict[str, Any]:
    """One whole process on ``tree``; its figures (wall from the outside, phases from the inside)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = tree
    env["TMPDIR"] = tempfile.mkdtemp(prefix="bpr", dir="/tmp")  # short: Ray's sockets live below it
    try:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", CHILD], cwd=tree, env=env, capture_output=True, text=True, timeout=300
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            return {"error": done.stderr[-1500:]}
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        left = os.listdir(env["TMPDIR"])
    finally:
        subprocess.run(["rm", "-rf", env["TMPDIR"]], check=False)
    return {
        "wall_s": round(wall, 3),
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()},
        "left_in_tmpdir": left,
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each figure over the runs that succeeded."""
    ok = [r for r in runs if "wall_s" in r]
    out: dict[str, Any] = {"runs": len(runs), "failed": len(runs) - len(ok)}
    for key in ("wall_s", "import_s", "init_s", "task_s", "shutdown_s"):
        values = [r[key] for r in ok]
        if values:
            out[key] = {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}
    return out


def uptime() -> str:
    """``uptime``'s line: the load figures beside a run."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """Run every tree ``--repeats`` times, alternating, and print/save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR (a checkout's root)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    trees = dict(item.split("=", 1) for item in args.tree)
    before = uptime()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for i in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(run_once(os.path.abspath(tree)))
            print(json.dumps({"tree": name, "run": i, **runs[name][-1]}), flush=True)
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "uptime_before": before,
        "uptime_after": uptime(),
        "trees": trees,
        "summary": {name: summarise(r) for name, r in runs.items()},
        "runs": runs,
    }
    print(json.dumps(record["summary"], indent=2))
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "private_ray.json"), "w") as f:
        json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

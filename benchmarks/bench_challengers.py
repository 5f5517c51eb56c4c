"""Benchmark: many challengers in one packed evaluation vs one evaluation per challenger.

The same 2M-row click log (200 zones, 16 features, requests of 20 rows) and the same small models
(logistic regressions fitted on seeded resamples) for every run. Each figure is a whole-process wall
clock of ``python -m airflow_ray_provider.workloads.evaluate --config-json ...`` (interpreter start,
imports, preflight with every model loaded, the scoring pass, metrics, ``metrics.json``), with no Ray
running beforehand: ``--engine ray`` starts a private local Ray in each process, ``--engine local``
scores in-process (the same packing either way).

* **packed run of N challengers**: the champion and N challengers in one evaluation, packed into
  groups of at most ``--models-per-actor`` models (so no actor holds all of them: 51 models are six
  pools);
* **single-challenger run**: the champion and one challenger. The sum of N single runs is N times its
  wall (every single run does the same work; the median of ``--single-repeats`` runs is used).

Goals (issue 25): the packed 50-challenger run within 10x the single-challenger run's wall, and the
bytes the scoring pass read (``run.io.bytes_read``) the same whatever N (each block read once).

Run once per count, so each command stays short: ``python -m benchmarks.bench_challengers --counts 1``,
then ``--counts 10``, ``--counts 50``; results accumulate in ``benchmarks/out/bench_challengers.json``
and each invocation prints the table of every count measured so far (``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
RESULTS = os.path.join(OUT, "bench_challengers.json")
ROWS, ZONES, FEATURES, GROUP_SIZE = 2_000_000, 200, 16, 20
GOAL_RATIO = 10.0


def dataset() -> str:
    """The cached 2M-row log."""
    from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset

    data = os.path.join(OUT, f"challengers-data-{ROWS}")
    if not os.path.exists(os.path.join(data, "_DONE")):
        shutil.rmtree(data, ignore_errors=True)
        make_eval_dataset(data, ROWS, zones=ZONES, features=FEATURES, group_size=GROUP_SIZE, seed=0)
        open(os.path.join(data, "_DONE"), "w").close()
    return data


def models(count: int, data: str) -> list[str]:
    """``count + 1`` small joblib models (the first is the champion), fitted once and cached."""
    import joblib
    import numpy as np
    import pyarrow.dataset as pads
    from sklearn.linear_model import LogisticRegression

    folder = os.path.join(OUT, "challenger-models")
    paths = [os.path.join(folder, f"m{i:03d}.joblib") for i in range(count + 1)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(folder, exist_ok=True)
    names = [f"f{i}" for i in range(FEATURES)]
    sample = pads.dataset(data).head(50_000, columns=[*names, "clicked"])
    x = np.column_stack([sample.column(n).to_numpy() for n in names]).astype(np.float64)
    y = sample.column("clicked").to_numpy()
    for i, path in enumerate(paths):
        if not os.path.exists(path):
            rows = np.random.default_rng(i).integers(0, len(y), len(y))
            joblib.dump(LogisticRegression(C=0.1 + i / 10, max_iter=200).fit(x[rows], y[rows]), path)
    return paths


def config(data: str, paths: list[str], out_dir: str, engine: str, models_per_actor: int) -> dict[str, Any]:
    """The evaluation config: champion ``paths[0]``, challengers ``c001``, ``c002``, ... from the rest."""
    named = {"champion": {"uri": paths[0]}} | {f"c{i:03d}": {"uri": p} for i, p in enumerate(paths) if i}
    return {
        "data_uri": data,
        "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"]},
        "models": named,
        "output_uri": out_dir,
        "bootstrap": {"samples": 0},
        "engine": engine,
        "scoring": {
            "concurrency": 1,
            "num_cpus": 0.25,
            "read_num_cpus": 0.25,
            "models_per_actor": models_per_actor,
        },
        "progress_interval_s": 30,
    }


def run_once(cfg: dict[str, Any]) -> dict[str, Any]:
    """One evaluation process from start to exit; its wall, engine, groups and read figures."""
    tmp = tempfile.mkdtemp(prefix="arpbc-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    argv = [sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(cfg)]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"evaluation failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    with open(os.path.join(cfg["output_uri"], "metrics.json")) as fh:
        run = json.load(fh)["run"]
    return {
        "wall_s": round(wall, 2),
        "engine": run["engine"]["name"],
        "groups": [len(g["models"]) for g in run["packing"]],
        "io": run["io"],
        "timings": run["timings"],
    }


def measure(count: int, engine: str, models_per_actor: int, single_repeats: int) -> dict[str, Any]:
    """The packed run of ``count`` challengers, and (for ``count == 1``) the single-challenger runs."""
    data = dataset()
    paths = models(count, data)
    entry: dict[str, Any] = {
        "count": count,
        "engine": engine,
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "uptime_before": _uptime(),
    }
    out_dir = os.path.join(OUT, f"challengers-{engine}-{count}")
    shutil.rmtree(out_dir, ignore_errors=True)
    entry["packed"] = run_once(config(data, paths, out_dir, engine, models_per_actor))
    if count == 1:
        singles = [
            run_once(config(data, paths, out_dir, engine, models_per_actor)) for _ in range(single_repeats)
        ]
        entry["single_walls_s"] = [entry["packed"]["wall_s"]] + [s["wall_s"] for s in singles]
    entry["uptime_after"] = _uptime()
    return entry


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "n/a"


def report(results: dict[str, dict[str, Any]], engine: str) -> str:
    """The Markdown table and the goal lines for ``engine``'s results."""
    mine = {int(k.split(":")[1]): v for k, v in results.items() if k.startswith(f"{engine}:")}
    single = mine.get(1, {}).get("single_walls_s")
    one = statistics.median(single) if single else None
    lines = [
        f"engine {engine}; single-challenger wall (median of {len(single or [])} runs): "
        + (f"{one:.1f} s" if one else "not measured (run --counts 1)"),
        "",
        "| challengers | models | groups (models each) | packed wall s | sum of single runs s | packed / "
        "sum | packed / 1-challenger | bytes read | passes | read / dataset | measured (UTC), load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for count in sorted(mine):
        r = mine[count]
        packed, io = r["packed"], r["packed"]["io"]
        total = one * count if one else None
        ratio = f"{packed['wall_s'] / one:.2f}x" if one else "-"
        vs_sum = f"{packed['wall_s'] / total:.2f}x" if total else "-"
        load = r["uptime_before"].split("load average:")[-1].strip()
        lines.append(
            f"| {count} | {count + 1} | {len(packed['groups'])} ({', '.join(map(str, packed['groups']))}) "
            f"| {packed['wall_s']:.1f} | {f'{total:.1f}' if total else '-'} | {vs_sum} | {ratio} "
            f"| {io['bytes_read']:,} | {io['passes']} | {io['read_fraction']:.3f} "
            f"| {r['measured_at']}, {load} |"
        )
    lines.append("")
    if one and 50 in mine:
        ratio = mine[50]["packed"]["wall_s"] / one
        met = "met" if ratio <= GOAL_RATIO else "NOT met"
        lines.append(f"goal: 50 challengers <= {GOAL_RATIO:g}x the 1-challenger wall: {ratio:.2f}x, {met}")
    else:
        lines.append("goal: 50 challengers <= 10x the 1-challenger wall: not measured yet")
    read = {r["packed"]["io"]["bytes_read"] for r in mine.values()}
    if len(mine) > 1:
        constant = "met" if len(read) == 1 else "NOT met"
        lines.append(
            f"goal: bytes read constant across {sorted(mine)} challengers: {sorted(read)}, {constant}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each ``--counts`` value (results accumulate) and print every count measured so far."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_challengers")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--engine", choices=("ray", "local"), default="ray")
    parser.add_argument("--models-per-actor", type=int, default=10)
    parser.add_argument("--single-repeats", type=int, default=2, help="extra single-challenger runs")
    parser.add_argument("--fresh", action="store_true", help="forget earlier results")
    args = parser.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    if os.path.exists(RESULTS) and not args.fresh:
        with open(RESULTS) as fh:
            results = json.load(fh)
    for count in args.counts:
        entry = measure(count, args.engine, args.models_per_actor, args.single_repeats)
        results[f"{args.engine}:{count}"] = entry
        print(json.dumps(entry), flush=True)
        with open(RESULTS, "w") as fh:
            json.dump(results, fh, indent=2)
    print(report(results, args.engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: champion-vs-challenger evaluation on Ray vs a single-process pandas/numpy computation.

Data: the synthetic click log of ``workloads.sample_data`` (16 features, groups of ~20 rows, 200 zones),
cached under ``benchmarks/out/``; two scikit-learn logistic regressions. Both sides compute the same
metrics per model, overall and per zone: accuracy, ROC AUC, log loss, calibration (mean predicted vs
observed CTR) and NDCG@5/10.

* single process: ``pyarrow`` -> pandas, ``predict_proba``, scikit-learn metrics per zone, the same
  vectorised NDCG; peak RSS of that process;
* Ray: ``python -m airflow_ray_provider.workloads.evaluate`` in a fresh local Ray (2 CPUs), with the
  default paired bootstrap (200 samples) on top; the peak of the summed RSS (and PSS) of the whole
  process tree (driver, GCS, raylet, workers), sampled every 0.2 s.

Run: ``python -m benchmarks.bench_evaluate [--rows 5000000 10000000]``; writes
``benchmarks/out/bench_evaluate.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
ZONES, FEATURES, GROUP_SIZE = 200, 16, 20


def dataset(rows: int) -> tuple[str, str, str]:
    """Cached data and models for ``rows`` rows."""
    from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset, make_models

    data = os.path.join(OUT, f"data-{rows}")
    models = os.path.join(OUT, "models")
    if not os.path.exists(os.path.join(data, "_DONE")):
        shutil.rmtree(data, ignore_errors=True)
        make_eval_dataset(data, rows, zones=ZONES, features=FEATURES, group_size=GROUP_SIZE, seed=0)
        open(os.path.join(data, "_DONE"), "w").close()
    champion = os.path.join(models, "champion.joblib")
    challenger = os.path.join(models, "challenger.joblib")
    if not (os.path.exists(champion) and os.path.exists(challenger)):
        champion, challenger = make_models(models, seed=0, features=FEATURES, zones=ZONES)
    return data, champion, challenger


class TreeSampler:
    """Samples the summed RSS and PSS of a process and all its descendants."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            rss = pss = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for proc in procs:
                try:
                    info = proc.memory_full_info()
                    rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self._stop.wait(self.interval)


def _run_child(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, int, int, float]:
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    with TreeSampler(proc.pid) as sampler:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({proc.returncode}):\n{out[-3000:]}")
    return out, sampler.peak_rss, sampler.peak_pss, time.monotonic() - start


def run_baseline(rows: int) -> dict[str, Any]:
    """The single-process computation, in a subprocess (for a clean peak RSS)."""
    data, champion, challenger = dataset(rows)
    argv = [sys.executable, "-m", "benchmarks.eval_baseline", data, champion, challenger]
    out, rss, pss, wall = _run_child(argv)
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "peak_rss_gb": rss / 1e9, "peak_pss_gb": pss / 1e9, "process_wall_s": wall}


def run_same_code(rows: int) -> dict[str, Any]:
    """The workload's per-block code serially in one process: the parallel-efficiency reference."""
    data, champion, challenger = dataset(rows)
    argv = [sys.executable, "-m", "benchmarks.eval_baseline", "--same-code", data, champion, challenger]
    out, rss, _, _ = _run_child(argv)
    return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_gb": rss / 1e9}


def run_ray(rows: int, cpus: int) -> dict[str, Any]:
    """The Ray evaluation CLI in a fresh local Ray; returns timings and the process-tree memory peak."""
    data, champion, challenger = dataset(rows)
    tmp = tempfile.mkdtemp(prefix="arpbe-", dir="/tmp")
    out_dir = os.path.join(OUT, f"eval-{rows}")
    cfg = {
        "data_uri": data,
        "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"]},
        "models": {"champion": {"uri": champion}, "challenger": {"uri": challenger}},
        "output_uri": out_dir,
        "progress_interval_s": 5,
    }
    env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    argv = [sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(cfg)]
    try:
        _, rss, pss, wall = _run_child(argv, env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(out_dir, "metrics.json")) as fh:
        doc = json.load(fh)
    timings = doc["run"]["timings"]
    return {
        "rows": doc["data"]["rows"],
        "wall_s": wall,
        **timings,
        "peak_rss_gb": rss / 1e9,
        "peak_pss_gb": pss / 1e9,
        "roc_auc": {m: v["roc_auc"] for m, v in doc["metrics"].items()},
    }


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "n/a"


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| rows | pandas/sklearn 1 proc rows/s (peak RSS GB) | same code 1 proc rows/s | Ray pipeline rows/s "
        "| Ray scoring-span rows/s | Ray init + start-up s | Ray wall s | Ray tree peak RSS GB (PSS) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    nan = float("nan")
    for r in results:
        b, same, ray = r.get("baseline") or {}, r.get("same_code_1_process") or {}, r["ray"]
        lines.append(
            f"| {r['rows']:,} | {b.get('rows_per_s', nan):,.0f} ({b.get('peak_rss_gb', nan):.2f}) "
            f"| {same.get('rows_per_s', nan):,.0f} | {ray['pipeline_rows_per_s'] or nan:,.0f} "
            f"| {ray['scoring_rows_per_s'] or nan:,.0f} "
            f"| {(ray['ray_init_s'] or 0) + (ray['startup_s'] or 0):.1f} | {ray['wall_s']:.1f} "
            f"| {ray['peak_rss_gb']:.2f} ({ray['peak_pss_gb']:.2f}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark at each ``--rows`` size and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_evaluate")
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000, 10_000_000])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    results = []
    for rows in args.rows:
        dataset(rows)
        entry: dict[str, Any] = {"rows": rows, "uptime_before": _uptime()}
        entry["baseline"] = None if args.skip_baseline else run_baseline(rows)
        entry["same_code_1_process"] = None if args.skip_baseline else run_same_code(rows)
        entry["ray"] = run_ray(rows, args.cpus)
        entry["uptime_after"] = _uptime()
        results.append(entry)
        print(json.dumps(entry), flush=True)
    if len(results) >= 2:
        print(
            f"memory ratio {results[-1]['rows']:,} vs {results[0]['rows']:,} rows: "
            f"{results[-1]['ray']['peak_rss_gb'] / results[0]['ray']['peak_rss_gb']:.2f}x (RSS)"
        )
    with open(os.path.join(OUT, "bench_evaluate.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

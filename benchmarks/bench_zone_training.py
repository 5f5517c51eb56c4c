"""Zone fan-out benchmark: 1,000 zones x 2,000 rows, Ridge and HistGradientBoosting(max_iter=50).

Run: ``python -m benchmarks.bench_zone_training [--zones N] [--rows R] [--models ridge,hgb]``
(``make bench`` runs it with the defaults). Figures go to stdout and ``benchmarks/out/zone_training.json``.

Every variant does the same work per zone: the built-in trainer (fit on 80 % of the rows, metrics on
the other 20 %) and a pickled, atomically written model file. Variants:

* ``sequential``: a plain loop in this process (math libraries capped at one thread);
* ``joblib``: ``Parallel(n_jobs=cores)`` (loky, default auto-batching) over the zones' DataFrames;
* ``ray_per_zone``: plain Ray, one task per zone, every zone's DataFrame shipped from the driver;
* ``zone_training``: this project's workload (``run_zone_training``), end to end: reading the Parquet
  file, staging it, adaptive batching, writes, manifest and summary.

The baselines get the data already grouped in memory (not timed); the workload's wall time includes
reading and staging it; its ``utilisation_fan_out`` uses the fan-out phase alone (``timings_s.fan_out``:
batching, training, writes), which compares with the baselines. Per-fit CPU time is
``time.process_time()`` around the trainer call, in the process that runs it (one thread per fit).
Utilisation = sum of per-fit CPU / (wall x cores); the ideal wall is sum of per-fit CPU / cores.
``cpu_efficiency`` = sum of per-fit CPU / CPU used meanwhile by this process and all its descendants
(Ray's GCS, raylet and workers, or loky's workers): the share of the CPU we burn that goes into fits,
which other users of a shared machine do not distort (utilisation is what a quiet machine would show
at best).
Ray is started once (local, ``num_cpus=cores``) and warmed up (workers started, scikit-learn
imported) before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

OUT_DIR = os.path.join(os.path.dirname(__file__), "out")
MODELS = {"ridge": ("ridge", {}), "hgb": ("hist_gradient_boosting", {"max_iter": 50})}


def _fit_and_save(trainer_name: str, kwargs: dict, frame: Any, model_path: str) -> float:
    """The per-zone work of the baselines; returns the CPU seconds of the fit."""
    from airflow_ray_provider.workloads.artifacts import write_bytes_atomic
    from airflow_ray_provider.workloads.trainers import load_trainer

    _one_thread()
    trainer = load_trainer(trainer_name)
    start = time.process_time()
    model, _ = trainer(frame, label_column="y", feature_columns=FEATURES, **kwargs)
    cpu = time.process_time() - start
    write_bytes_atomic(model_path, pickle.dumps(model, protocol=5))
    return cpu


FEATURES = [f"f{i}" for i in range(10)]
_limited: list[bool] = []


def _one_thread() -> None:
    """One math thread per fit in every variant (as the workload does), so per-fit CPU compares."""
    if not _limited:
        import sklearn.utils._openmp_helpers  # noqa: F401  (load OpenMP so that the limit reaches it)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1)
        _limited.append(True)


def bench_sequential(frames: dict[str, Any], trainer: str, kwargs: dict, out: str) -> tuple[float, float]:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        start = time.perf_counter()
        cpu = sum(_fit_and_save(trainer, kwargs, f, f"{out}/{z}.joblib") for z, f in frames.items())
        return time.perf_counter() - start, cpu


def bench_joblib(
    frames: dict[str, Any], trainer: str, kwargs: dict, out: str, cores: int
) -> tuple[float, float]:
    from joblib import Parallel, delayed

    start = time.perf_counter()
    cpus = Parallel(n_jobs=cores)(
        delayed(_fit_and_save)(trainer, kwargs, f, f"{out}/{z}.joblib") for z, f in frames.items()
    )
    return time.perf_counter() - start, float(sum(cpus))


def bench_ray_per_zone(frames: dict[str, Any], trainer: str, kwargs: dict, out: str) -> tuple[float, float]:
    import ray

    task = ray.remote(num_cpus=1)(_fit_and_save)
    start = time.perf_counter()
    refs = [task.remote(trainer, kwargs, f, f"{out}/{z}.joblib") for z, f in frames.items()]
    cpus = ray.get(refs)
    return time.perf_counter() - start, float(sum(cpus))


def bench_workload(data_uri: str, trainer: str, kwargs: dict, out: str) -> tuple[float, float, dict]:
    import pyarrow.parquet as pq

    from airflow_ray_provider.workloads.zone_config import parse_config
    from airflow_ray_provider.workloads.zone_training import run_zone_training

    cfg = parse_config(
        {
            "application": "bench",
            "data_uri": data_uri,
            "zone_column": "zone",
            "label_column": "y",
            "output_uri": out,
            "trainer": trainer,
            "trainer_kwargs": kwargs,
            "progress_interval_s": 5,
        }
    )
    start = time.perf_counter()
    summary = run_zone_training(cfg)
    wall = time.perf_counter() - start
    table = pq.read_table(f"{out}/manifest.parquet", columns=["cpu_s", "status"])
    assert summary["failed"] == 0, summary["failed_zones"]
    return wall, float(sum(table.column("cpu_s").to_pylist())), summary["run"]["timings_s"]


def _record(
    results: list[dict], model: str, variant: str, wall: float, cpu: float, cores: int, **extra: Any
) -> None:
    row = {
        "model": model,
        "variant": variant,
        "wall_s": round(wall, 3),
        "fit_cpu_s": round(cpu, 3),
        "ideal_wall_s": round(cpu / cores, 3),
        "utilisation": round(cpu / (wall * cores), 3),
        **extra,
    }
    results.append(row)
    print(json.dumps(row), flush=True)


def _group(data_uri: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    frame = pq.read_table(data_uri).to_pandas()
    return {str(z): g.reset_index(drop=True) for z, g in frame.groupby("zone", sort=True)}


def _tree_cpu() -> float:
    """CPU seconds used so far by this process and its descendants (Ray's raylet, workers, loky)."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _peak_rss_during(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn`` while sampling this process's RSS; return its result and the peak RSS growth."""
    import psutil

    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.05)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        return fn(), peak[0] - base
    finally:
        stop.set()
        watcher.join()


def run(zones: int, rows: int, models: Sequence[str], work: str, memory_zones: int) -> list[dict]:
    import ray

    from airflow_ray_provider.workloads.sample_zones import make_zone_dataset

    cores = os.cpu_count() or 1
    data_uri = make_zone_dataset(f"{work}/data.parquet", zones, rows, features=10, seed=0)
    warm_uri = make_zone_dataset(f"{work}/warm.parquet", 4 * cores, 200, features=10, seed=1)
    frames = _group(data_uri)
    results: list[dict] = []
    ray.init(num_cpus=cores, address="local", include_dashboard=False, logging_level="WARNING")
    try:
        for name in models:
            trainer, kwargs = MODELS[name]
            bench_workload(warm_uri, trainer, kwargs, f"{work}/warm-{name}")  # warm workers, imports
            bench_ray_per_zone(_group(warm_uri), trainer, kwargs, f"{work}/warm-{name}-ray")
            bench_joblib(_group(warm_uri), trainer, kwargs, f"{work}/warm-{name}-joblib", cores)
            for variant in ("sequential", "joblib", "ray_per_zone", "zone_training"):
                out = f"{work}/{name}-{variant}"
                extra: dict[str, Any] = {}
                tree_cpu = _tree_cpu()
                if variant == "sequential":
                    wall, cpu = bench_sequential(frames, trainer, kwargs, out)
                elif variant == "joblib":
                    wall, cpu = bench_joblib(frames, trainer, kwargs, out, cores)
                elif variant == "ray_per_zone":
                    wall, cpu = bench_ray_per_zone(frames, trainer, kwargs, out)
                else:
                    wall, cpu, timings = bench_workload(data_uri, trainer, kwargs, out)
                    extra["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
                    extra["utilisation_fan_out"] = round(cpu / (timings["fan_out"] * cores), 3)
                extra["cpu_efficiency"] = round(cpu / max(_tree_cpu() - tree_cpu, 1e-9), 3)
                _record(results, name, variant, wall, cpu, cores, zones=zones, rows_per_zone=rows, **extra)
        if memory_zones:
            results.append(_memory_check(work, memory_zones))
    finally:
        ray.shutdown()
    return results


def _memory_check(work: str, zones: int) -> dict:
    """Driver RSS growth while training ``zones`` small Ridge zones (flat = bounded in-flight tasks)."""
    from airflow_ray_provider.workloads.sample_zones import make_zone_dataset

    uri = make_zone_dataset(f"{work}/many.parquet", zones, 100, features=10, seed=2)
    (wall, cpu, _), growth = _peak_rss_during(lambda: bench_workload(uri, "ridge", {}, f"{work}/many-out"))
    row = {"check": "driver_memory", "zones": zones, "rows_per_zone": 100, "wall_s": round(wall, 2)}
    row.update(driver_peak_rss_growth_mb=round(growth / 2**20, 1), fit_cpu_s=round(cpu, 2))
    print(json.dumps(row), flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print and save the figures."""
    parser = argparse.ArgumentParser(prog="bench_zone_training", description=__doc__.splitlines()[0])
    parser.add_argument("--zones", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--models", default="ridge,hgb")
    parser.add_argument("--memory-zones", type=int, default=10_000, help="0 skips the memory check")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    work = tempfile.mkdtemp(prefix="zbench-")
    os.environ["RAY_TMPDIR"] = work  # a fresh, short temp dir: never joins another Ray on the machine
    load_before = _uptime()
    try:
        results = run(args.zones, args.rows, args.models.split(","), work, args.memory_zones)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "load_before": load_before,
        "load_after": _uptime(),
        "cores": os.cpu_count(),
        "results": results,
    }
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "zone_training.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    print(f"uptime before: {load_before}\nuptime after:  {report['load_after']}")
    return 0


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())

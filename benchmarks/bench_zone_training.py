"""Zone fan-out benchmark: 1,000 zones x 2,000 rows, Ridge and HistGradientBoosting(max_iter=50).

Run: ``python -m benchmarks.bench_zone_training [--zones N] [--rows R] [--models ridge,hgb] [--variants ...]``
(``make bench`` runs it with the defaults). Figures go to stdout and ``benchmarks/out/zone_training.json``.

Every variant does the same work per zone: the built-in trainer (fit on 80 % of the rows, metrics on
the other 20 %) and a pickled, atomically written model file. Variants:

* ``sequential``: a plain loop in this process (math libraries capped at one thread);
* ``joblib``: ``Parallel(n_jobs=cores)`` (loky, default auto-batching) over the zones' DataFrames;
* ``ray_per_zone``: plain Ray, one task per zone, every zone's DataFrame shipped from the driver;
* ``zone_training``: this project's workload (``run_zone_training``, ``engine: ray`` on the Ray started
  here), end to end: reading the Parquet file, staging it, adaptive batching, writes, manifest and summary;
* ``zone_training_local``: the same with ``engine: local`` (worker processes, no Ray; their start-up is
  in its fan-out);
* ``task_in_process``: the workload's task code (``run_batch``) over every zone in this process, one
  core, no Ray: the ceiling of the workload's utilisation with its per-zone work around the fits.

Models go to ``--output-dir`` (default ``/dev/shm``): on this VM's ext4 (no journal), creating a file
costs ~20 µs normally but up to ~1 ms for about five minutes after many deletions anywhere on the
disk (a test run, a previous benchmark's cleanup), which would measure the disk's history rather
than the variants. ``file_create_us`` records the cost per file in the output and work directories.

The baselines get the data already grouped in memory (not timed); the workload's wall time includes
reading and staging it; its ``utilisation_fan_out`` uses the fan-out phase alone (``timings_s.fan_out``:
batching, training, writes), which compares with the baselines. Per-fit CPU time is
``time.process_time()`` around the trainer call, in the process that runs it (one thread per fit).
Utilisation = sum of per-fit CPU / (wall x cores); the ideal wall is sum of per-fit CPU / cores.
``cpu_efficiency`` = sum of per-fit CPU / CPU used meanwhile by this process and all its descendants
(Ray's GCS, raylet and workers, or loky's workers): the share of the CPU we burn that goes into fits,
which other users of a shared machine do not distort (utilisation is what a quiet machine would show
at best).
Ray is started once (``--ray private``, the default: as a standalone workload starts it;
``--ray plain``: a user's ``ray.init(num_cpus=cores)``) and warmed up (workers started, scikit-learn
imported) before anything is timed. For the workload, ``slots_busy_in_tasks`` is the share of the
fan-out its CPU slots spent inside tasks (the rest is Ray's turnaround between tasks) and
``fit_share_of_task_time`` the share of that spent in the trainer, the product of
``cpu_share_of_task_time`` (the workers' CPU seconds in tasks / their in-task seconds: below 1 when
the task's core ran other processes, such as Ray's own, meanwhile) and ``fit_share_of_task_cpu``.
To compare with another checkout, run this module from that checkout's folder with
``PYTHONPATH=<that folder>`` (Ray's workers inherit it) and the same virtual environment.
"""

from __future__ import annotations

import argparse
import contextlib
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
IN_PROCESS_BATCH = 100


def _fit_and_save(trainer_name: str, kwargs: dict, frame: Any, model_path: str) -> float:
    """The per-zone work of the baselines; returns the CPU seconds of the fit."""
    from airflow_ray_provider.workloads.common.artifacts import write_bytes_atomic
    from airflow_ray_provider.workloads.zone_training.trainers import load_trainer

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


def _config(data_uri: str, trainer: str, kwargs: dict, out: str, engine: str = "ray") -> Any:
    from airflow_ray_provider.workloads.zone_training.config import parse_config

    return parse_config(
        {
            "application": "bench",
            "data_uri": data_uri,
            "zone_column": "zone",
            "label_column": "y",
            "output_uri": out,
            "trainer": trainer,
            "trainer_kwargs": kwargs,
            "progress_interval_s": 5,
            "engine": engine,
        }
    )


def bench_workload(
    data_uri: str, trainer: str, kwargs: dict, out: str, engine: str = "ray"
) -> tuple[float, float, dict]:
    import pyarrow.parquet as pq

    from airflow_ray_provider.workloads.zone_training.run import run_zone_training

    start = time.perf_counter()
    summary = run_zone_training(_config(data_uri, trainer, kwargs, out, engine))
    wall = time.perf_counter() - start
    table = pq.read_table(f"{out}/manifest.parquet", columns=["cpu_s", "status"])
    assert summary["failed"] == 0, summary["failed_zones"]
    return wall, float(sum(table.column("cpu_s").to_pylist())), summary["run"]


def bench_task_in_process(data_uri: str, trainer: str, kwargs: dict, out: str) -> tuple[float, float, float]:
    """The workload's task code on every zone, in this process: no Ray, no scheduling, one core.

    Returns (wall, fit CPU, this process's CPU while timed). Its utilisation of its one core is the
    ceiling of the workload's: the per-zone work around the fits (the zone's frame, pickling, the
    atomic model write) and nothing else. Timed from the staged chunks (staging itself is not timed,
    as for the baselines), in batches of :data:`IN_PROCESS_BATCH` zones, about the workload's task
    size for Ridge.
    """
    from airflow_ray_provider.workloads.zone_training.dataset import inspect_dataset
    from airflow_ray_provider.workloads.zone_training.run import worker_context
    from airflow_ray_provider.workloads.zone_training.staging import stage_chunk, zone_pieces
    from airflow_ray_provider.workloads.zone_training.worker import ZoneWork, run_batch

    cfg = _config(data_uri, trainer, kwargs, out)
    plan = inspect_dataset(cfg, numeric_features=True)
    staged = [
        stage_chunk(plan.fs, spec, plan.file_columns, plan.columns, plan.zone_column) for spec in plan.chunks
    ]
    pieces = zone_pieces([index for _, index in staged])
    works = [ZoneWork(key, plan.zone_rows[key], tuple(ps)) for key, ps in sorted(pieces.items())]
    ctx = worker_context(cfg, plan)
    tables = [table for table, _ in staged]
    start, cpu_start = time.perf_counter(), time.process_time()
    rows = [
        row
        for first in range(0, len(works), IN_PROCESS_BATCH)
        for row in run_batch(ctx, works[first : first + IN_PROCESS_BATCH], tables, task_key=first)["results"]
    ]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    assert len(rows) == len(works) and all(r["status"] == "succeeded" for r in rows)
    return wall, float(sum(r["cpu_s"] for r in rows)), cpu


def file_create_us(directory: str, files: int = 500) -> float:
    """CPU microseconds to create one small file in ``directory`` (the files are left for the final cleanup).

    On this VM's ext4 (mounted without a journal) this swings from ~20 µs to ~1 ms for about five
    minutes after many files were deleted anywhere on the disk: ext4 skips recently deleted inodes
    one by one (``recently_deleted()`` in ``find_inode_bit``, seen with ``perf``).
    """
    probe = tempfile.mkdtemp(prefix="create-probe-", dir=directory)
    start = time.process_time()
    for i in range(files):
        os.close(os.open(os.path.join(probe, str(i)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return round((time.process_time() - start) / files * 1e6, 1)


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


VARIANTS = ("sequential", "joblib", "ray_per_zone", "zone_training", "zone_training_local", "task_in_process")


def run(
    zones: int,
    rows: int,
    models: Sequence[str],
    work: str,
    output: str,
    memory_zones: int,
    variants: Sequence[str] = VARIANTS,
    repeats: int = 1,
    ray_start: str = "private",
) -> list[dict]:
    import ray

    from airflow_ray_provider.workloads.common.ray_session import ray_session
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    cores = os.cpu_count() or 1
    data_uri = make_zone_dataset(f"{work}/data.parquet", zones, rows, features=10, seed=0)
    warm_uri = make_zone_dataset(f"{work}/warm.parquet", 4 * cores, 200, features=10, seed=1)
    frames = _group(data_uri)
    results: list[dict] = []
    session = contextlib.ExitStack()
    if ray_start == "private":  # as a standalone workload starts it (workloads/common/ray_session)
        session.enter_context(ray_session("local"))
    else:  # as a user's script would
        ray.init(num_cpus=cores, address="local", include_dashboard=False, logging_level="WARNING")
        session.callback(ray.shutdown)
    with session:
        for name in models:
            trainer, kwargs = MODELS[name]
            bench_workload(warm_uri, trainer, kwargs, f"{output}/warm-{name}")  # warm workers, imports
            if "ray_per_zone" in variants:
                bench_ray_per_zone(_group(warm_uri), trainer, kwargs, f"{output}/warm-{name}-ray")
            if "joblib" in variants:
                bench_joblib(_group(warm_uri), trainer, kwargs, f"{output}/warm-{name}-joblib", cores)
            for round_no, variant in enumerate(v for _ in range(repeats) for v in VARIANTS if v in variants):
                out = f"{output}/{name}-{variant}-{round_no}"
                extra: dict[str, Any] = {"file_create_us": file_create_us(output)}
                tree_cpu = _tree_cpu()
                used_cores = cores
                if variant == "sequential":
                    wall, cpu = bench_sequential(frames, trainer, kwargs, out)
                elif variant == "joblib":
                    wall, cpu = bench_joblib(frames, trainer, kwargs, out, cores)
                elif variant == "ray_per_zone":
                    wall, cpu = bench_ray_per_zone(frames, trainer, kwargs, out)
                elif variant == "task_in_process":
                    wall, cpu, task_cpu = bench_task_in_process(data_uri, trainer, kwargs, out)
                    used_cores = 1
                    extra["cpu_efficiency"] = round(cpu / task_cpu, 3)  # without the untimed staging
                else:
                    engine = "local" if variant == "zone_training_local" else "ray"
                    wall, cpu, run_info = bench_workload(data_uri, trainer, kwargs, out, engine)
                    timings, tasks = run_info["timings_s"], run_info["tasks"]
                    extra["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
                    extra["utilisation_fan_out"] = round(cpu / (timings["fan_out"] * cores), 3)
                    extra["tasks"] = tasks["count"]
                    extra["slots_busy_in_tasks"] = round(
                        tasks["busy_s"] / (tasks["slots"] * timings["fan_out"]), 3
                    )
                    extra["fit_share_of_task_time"] = round(cpu / tasks["busy_s"], 3)
                    if tasks.get("busy_cpu_s"):  # fit share = CPU share of task time x fit share of task CPU
                        extra["cpu_share_of_task_time"] = round(tasks["busy_cpu_s"] / tasks["busy_s"], 3)
                        extra["fit_share_of_task_cpu"] = round(cpu / tasks["busy_cpu_s"], 3)
                extra.setdefault("cpu_efficiency", round(cpu / max(_tree_cpu() - tree_cpu, 1e-9), 3))
                _record(
                    results, name, variant, wall, cpu, used_cores, zones=zones, rows_per_zone=rows, **extra
                )
        if memory_zones:
            results.append(_memory_check(work, output, memory_zones))
    return results


def _memory_check(work: str, output: str, zones: int) -> dict:
    """Driver RSS growth while training ``zones`` small Ridge zones (flat = bounded in-flight tasks)."""
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    uri = make_zone_dataset(f"{work}/many.parquet", zones, 100, features=10, seed=2)
    (wall, cpu, _), growth = _peak_rss_during(lambda: bench_workload(uri, "ridge", {}, f"{output}/many-out"))
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
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant, one after another")
    parser.add_argument(
        "--ray",
        choices=("private", "plain"),
        default="private",
        help="private: the Ray a standalone workload starts; plain: ray.init() as a user's script",
    )
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS)
    )
    parser.add_argument(
        "--output-dir",
        default=_default_output_dir(),
        help="where every variant writes its models (default: /dev/shm when there is one, see README)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    work = tempfile.mkdtemp(prefix="zbench-")
    os.environ["RAY_TMPDIR"] = work  # a fresh, short temp dir: never joins another Ray on the machine
    output = tempfile.mkdtemp(prefix="zbench-out-", dir=args.output_dir or work)
    load_before = _uptime()
    create_us = {"output_dir": file_create_us(output), "work_dir": file_create_us(work)}
    print(json.dumps({"file_create_us": create_us}), flush=True)
    try:
        variants = args.variants.split(",")
        unknown = sorted(set(variants) - set(VARIANTS))
        if unknown:
            parser.error(f"unknown variants {unknown}")
        results = run(
            args.zones,
            args.rows,
            args.models.split(","),
            work,
            output,
            args.memory_zones,
            variants,
            args.repeats,
            args.ray,
        )
    finally:
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "load_before": load_before,
        "load_after": _uptime(),
        "cores": os.cpu_count(),
        "ray": args.ray,
        "output_dir": args.output_dir or tempfile.gettempdir(),
        "file_create_us_at_start": create_us,
        "results": results,
    }
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "zone_training.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    print(f"uptime before: {load_before}\nuptime after:  {report['load_after']}")
    return 0


def _default_output_dir() -> str:
    """``/dev/shm`` (tmpfs) when writable, else "" (the work dir): see :func:`file_create_us` for why."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else ""


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())

"""The zone job's allocated utilisation, as its usage record reports it (figures in benchmarks/usage.md).

A local head with 2 CPUs (its own cluster: ``reserved`` is the whole head from the job's submission to
its end) runs one zone-training job over ``--zones`` zones of ``--rows`` rows with ``--trainer``. The
record's ``utilisation.allocated_cpu`` is the CPU-seconds the job's tasks were allocated (each task's
request times its ``task:execute`` span) over the head's CPU-seconds in that window. Goal: >= 0.9 for
Ridge at 1,000 zones. It prints the record's line and the zone summary's own figures beside it
(``run.tasks.cpu_s``: the tasks' own wall seconds x ``num_cpus``; ``run.trainer_cpu_s``: the fits' CPU).

Each job also gets a ``timeline``: where the reserved CPU-seconds went, from the job's task list and
the zone summary (seconds from the job's submission): ``queued`` (submission to the driver's start),
``driver`` (the driver's start to its first task), the staging and training tasks' first start and
last end, ``tail`` (the last task's end to the job's end), and the CPU-seconds allocated and left
idle in each of those stretches.

``--baseline DIR`` (a checkout, e.g. ``git worktree add --detach DIR main``) runs the same job on
``DIR``'s code too (``cd DIR && PYTHONPATH=DIR``, with this venv; this checkout's side the same way
with its own folder), on the same data, each job on a fresh head, the sides taking turns
``--repeats`` times. Models and manifests of the two sides are compared (``same_models``: every
zone's model bytes and its manifest row but the timings, which differ from run to run).

Run: ``python -m benchmarks.bench_usage_zones [--repeats N] [--baseline DIR]`` (``--help`` for the
knobs). Starts and stops its own heads.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out" / "bench_usage_zones.json"
HERE = str(Path(__file__).resolve().parent.parent)
GOAL = 0.9
CPUS = 2
#: Manifest columns that differ between two runs of the same code (timings, the run's bundle names).
_RUN_COLUMNS = ("duration_s", "cpu_s", "artifact")


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def run_job(data_uri: str, out_dir: str, trainer: str, code: str) -> dict[str, Any]:
    """One zone-training job on a fresh 2-CPU head, with ``code``'s package; its record and timeline."""
    from airflow_ray_provider.jobs.client import JobClient
    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.usage import UsageOptions, usage_line
    from airflow_ray_provider.launch.usage.observer import collect_usage, state_list
    from airflow_ray_provider.local import LocalHeadConfig, read_token, start_head, stop_head
    from airflow_ray_provider.templates.common import workload_entrypoint
    from airflow_ray_provider.workloads.common import artifacts

    config = {
        "application": "bench", "data_uri": data_uri, "zone_column": "zone", "label_column": "y",
        "output_uri": out_dir, "trainer": trainer, "engine": "ray", "max_retries": 0,
    }  # fmt: skip
    head = start_head(LocalHeadConfig(num_cpus=CPUS, auth=True), name="bench-usage-zones")
    try:
        token = read_token(head.token_file) if head.token_file else None
        api = JobClient(head.dashboard_url, token=token)
        sid = f"bench_usage_zones_{time.time_ns()}"
        module = "airflow_ray_provider.workloads.zone_training"
        command = shlex.join(workload_entrypoint(sys.executable, module, config))
        # ``-m`` puts the working directory first on sys.path, and Ray puts the driver's on its workers'.
        entrypoint = f"cd {shlex.quote(code)} && PYTHONPATH={shlex.quote(code)} {command}"
        api.submit(JobSpec(entrypoint=entrypoint), sid)
        while not (job := api.get_job(sid)) or not job.is_terminal:
            time.sleep(0.5)
        reader = api.reader()
        request = UsageOptions(submission_id=sid, cluster="bench", mode="one_task", own_cluster=True)
        record = collect_usage(reader, request)
        tasks = (
            state_list(reader, "/api/v0/tasks", ("job_id", record["ray_job_id"]))[0]
            if record["ray_job_id"]
            else []
        )
        logs = api.get_logs(sid)
    finally:
        stop_head(head)
    summary = artifacts.read_json(f"{out_dir}/summary.json") if job.status == "SUCCEEDED" else {}
    run = summary.get("run") or {}
    figure = record["utilisation"]["allocated_cpu"]
    return {
        "job": job.status, "allocated_utilisation": figure, "met": figure is not None and figure >= GOAL,
        "line": usage_line(record), "phases": record["phases"], "counts": record["counts"],
        "record_allocated_cpu_s": round(record["allocated"].get("CPU", 0.0) * 3600, 2),
        "record_reserved_cpu_s": round(record["reserved"].get("CPU", 0.0) * 3600, 2),
        "allocated_cpu_s_by_function": record["allocated_cpu_s_by_function"],
        "summary_task_cpu_s": (run.get("tasks") or {}).get("cpu_s"),
        "summary_trainer_cpu_s": run.get("trainer_cpu_s"), "timings_s": run.get("timings_s"),
        "timeline": timeline(record["times"], tasks, run),
        "not_available": record["not_available"],
        "log_tail": logs[-3000:] if job.status != "SUCCEEDED" else "",
        "log": logs,
    }  # fmt: skip


def _spans(task: dict[str, Any]) -> list[tuple[float, float]]:
    """A task attempt's ``task:execute`` spans (epoch seconds), else its start to its end."""
    events = (task.get("profiling_data") or {}).get("events") or []
    spans = [
        (float(e["start_time"]) / 1000.0, float(e["end_time"]) / 1000.0)
        for e in events
        if e.get("event_name") == "task:execute" and e.get("end_time")
    ]
    if not spans and task.get("start_time_ms") and task.get("end_time_ms"):
        spans = [(task["start_time_ms"] / 1000.0, task["end_time_ms"] / 1000.0)]
    return spans


def _held(spans: list[tuple[float, float, float]], lo: float, hi: float) -> float:
    """CPU-seconds the ``(start, end, cpus)`` spans held within ``[lo, hi]``."""
    return sum(max(0.0, min(e, hi) - max(s, lo)) * cpus for s, e, cpus in spans)


def timeline(times: dict[str, Any], tasks: list[dict[str, Any]], run: dict[str, Any]) -> dict[str, Any]:
    """Where the job's reserved CPU-seconds went, stretch by stretch (seconds from the submission)."""
    t0, end = times.get("submitted") or 0.0, times.get("ended") or 0.0
    driver = times.get("driver_started") or t0
    by_function: dict[str, list[tuple[float, float, float]]] = {}
    workers: dict[str, list[list[Any]]] = {}  # per worker: [function, start, end] of its task attempts
    for task in tasks:
        if task.get("type") not in (None, "NORMAL_TASK"):
            continue
        cpus = float((task.get("required_resources") or {}).get("CPU") or 0.0)
        name = str(task.get("func_or_class_name") or task.get("name") or "task")
        by_function.setdefault(name, []).extend((s, e, cpus) for s, e in _spans(task))
        worker = str(task.get("worker_id") or "")[:8]
        workers.setdefault(worker, []).extend(
            [name, round(s - t0, 3), round(e - t0, 3)] for s, e in _spans(task)
        )
    every = [span for spans in by_function.values() for span in spans]
    first = min((s for s, _, _ in every), default=end)
    last = max((e for _, e, _ in every), default=end)
    functions = {
        name: {
            "tasks": len(spans),
            "first_start": round(min(s for s, _, _ in spans) - t0, 3),
            "last_end": round(max(e for _, e, _ in spans) - t0, 3),
            "cpu_s": round(_held(spans, t0, end), 3),
        }
        for name, spans in sorted(by_function.items(), key=lambda kv: min(s for s, _, _ in kv[1]))
    }
    marks = [("queued", t0, driver), ("driver_to_first_task", driver, first)]
    # Stretches between the task functions' first starts (staging, then training), then the tail.
    starts = sorted((min(s for s, _, _ in spans), name) for name, spans in by_function.items())
    for (start, name), nxt in zip(starts, [*[s for s, _ in starts[1:]], last], strict=True):
        marks.append((f"from_first_{name}", start, nxt))
    marks.append(("tail_after_last_task", last, end))
    stretches = {
        label: {
            "s": round(hi - lo, 3),
            "allocated_cpu_s": round(_held(every, lo, hi), 3),
            "idle_cpu_s": round(CPUS * (hi - lo) - _held(every, lo, hi), 3),
        }
        for label, lo, hi in marks
        if hi >= lo
    }
    driver_run = {}
    if run.get("started_at") and run.get("finished_at"):
        from datetime import datetime

        began = datetime.fromisoformat(run["started_at"]).timestamp()
        finished = datetime.fromisoformat(run["finished_at"]).timestamp()
        driver_run = {
            "run_started": round(began - t0, 3),  # the workload's first line (after the driver's imports)
            "run_finished": round(finished - t0, 3),  # before the artifact is written
        }
    spans_by_worker = {w: sorted(rows, key=lambda row: row[1]) for w, rows in workers.items()}
    return {
        "job_s": round(end - t0, 3),
        "functions": functions,
        "stretches": stretches,
        **driver_run,
        "workers": spans_by_worker,
    }


def same_models(left: str, right: str) -> dict[str, Any]:
    """Whether two runs wrote the same models and manifests (timings and bundle names aside).

    Per-zone model files (this benchmark's layout) are compared byte for byte; zones in bundles by
    their unpickled model, pickled again.
    """
    import pickle

    import pyarrow.parquet as pq

    from airflow_ray_provider.workloads.zone_training.loading import load_zone_models

    def rows(out: str) -> dict[str, dict[str, Any]]:
        table = pq.read_table(os.path.join(out, "manifest.parquet"))
        return {r["zone"]: r for r in table.to_pylist()}

    def model_bytes(out: str, row: dict[str, Any], loaded: dict[str, Any]) -> bytes | None:
        if row["artifact_key"] is None and row["artifact"]:
            return Path(row["artifact"]).read_bytes()
        return pickle.dumps(loaded[row["zone"]], protocol=5) if row["zone"] in loaded else None

    a, b = rows(left), rows(right)
    plain = {z: {k: v for k, v in r.items() if k not in _RUN_COLUMNS} for z, r in a.items()}
    other = {z: {k: v for k, v in r.items() if k not in _RUN_COLUMNS} for z, r in b.items()}
    if plain != other:
        return {"manifest_same": False, "zones": [len(a), len(b)]}
    la, lb = load_zone_models(left), load_zone_models(right)
    differ = [z for z in a if model_bytes(left, a[z], la) != model_bytes(right, b[z], lb)]
    return {"manifest_same": True, "zones": len(a), "models_differ": len(differ)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print and write its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zones", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--trainer", default="ridge")
    parser.add_argument("--repeats", type=int, default=1, help="jobs per side (the sides take turns)")
    parser.add_argument("--baseline", help="a checkout (e.g. of main) whose code runs the same job too")
    args = parser.parse_args(argv)

    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    work = tempfile.mkdtemp(prefix="bench-uz-")
    data_uri = make_zone_dataset(f"{work}/data.parquet", args.zones, args.rows, features=10, seed=0)
    sides = {"this": HERE}
    if args.baseline:
        sides["base"] = os.path.abspath(args.baseline)
    result: dict[str, Any] = {
        "zones": args.zones, "rows_per_zone": args.rows, "trainer": args.trainer, "goal": GOAL,
        "uptime_before": _uptime(), "runs": [],
    }  # fmt: skip
    outs: dict[str, str] = {}
    for repeat in range(args.repeats):
        for side, code in sides.items():
            out_dir = f"{work}/out-{side}-{repeat}"
            figures = run_job(data_uri, out_dir, args.trainer, code)
            outs.setdefault(side, out_dir)
            row = {"side": side, "repeat": repeat, "uptime": _uptime(), **figures}
            result["runs"].append(row)
            shown = {k: v for k, v in row.items() if k != "log" and (k != "log_tail" or v)}
            shown["timeline"] = {k: v for k, v in row["timeline"].items() if k != "workers"}
            print(json.dumps(shown), flush=True)
    result["uptime_after"] = _uptime()
    if "base" in outs and all(r["job"] == "SUCCEEDED" for r in result["runs"]):
        result["same_models"] = same_models(outs["this"], outs["base"])
    for side in sides:
        figures = [r["allocated_utilisation"] for r in result["runs"] if r["side"] == side]
        result[f"{side}_allocated_utilisation"] = figures
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

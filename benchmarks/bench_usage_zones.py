"""The zone job's allocated utilisation, as its usage record reports it (figures in benchmarks/usage.md).

A local head with 2 CPUs (its own cluster: ``reserved`` is the whole head from the job's submission to
its end) runs one zone-training job over ``--zones`` zones of ``--rows`` rows with ``--trainer``. The
record's ``utilisation.allocated_cpu`` is the CPU-seconds the job's tasks were allocated (each task's
request times its ``task:execute`` span) over the head's CPU-seconds in that window. Goal: >= 0.9 for
Ridge at 1,000 zones. It prints the record's line and the zone summary's own figures beside it
(``run.tasks.cpu_s``: the tasks' own wall seconds x ``num_cpus``; ``run.trainer_cpu_s``: the fits' CPU).

Run: ``python -m benchmarks.bench_usage_zones`` (``--help`` for the knobs). Starts and stops its own head.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "bench_usage_zones.json"
GOAL = 0.9


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print and write its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zones", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--trainer", default="ridge")
    args = parser.parse_args(argv)

    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.job_api import JobApiClient
    from airflow_ray_provider.launch.usage import DashboardState, UsageRequest, collect_usage
    from airflow_ray_provider.local.head import LocalHeadConfig, read_token, start_head, stop_head
    from airflow_ray_provider.templates.common import workload_entrypoint
    from airflow_ray_provider.workloads.common import artifacts
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    work = tempfile.mkdtemp(prefix="bench-uz-")
    data_uri = make_zone_dataset(f"{work}/data.parquet", args.zones, args.rows, features=10, seed=0)
    config = {
        "application": "bench", "data_uri": data_uri, "zone_column": "zone", "label_column": "y",
        "output_uri": f"{work}/out", "trainer": args.trainer, "engine": "ray", "max_retries": 0,
    }  # fmt: skip
    head = start_head(LocalHeadConfig(num_cpus=2, auth=True), name="bench-usage-zones")
    try:
        token = read_token(head.token_file) if head.token_file else None
        api = JobApiClient(head.dashboard_url, token=token)
        sid = f"bench_usage_zones_{time.time_ns()}"
        module = "airflow_ray_provider.workloads.zone_training"
        entrypoint = shlex.join(workload_entrypoint(sys.executable, module, config))
        api.submit_job(JobSpec(entrypoint=entrypoint), sid)
        while not (job := api.get_job(sid)) or not job.is_terminal:
            time.sleep(0.5)
        state = DashboardState(head.dashboard_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        request = UsageRequest(submission_id=sid, cluster="bench", mode="one_task", own_cluster=True)
        record = collect_usage(state, request)
        summary = artifacts.read_json(f"{work}/out/summary.json") if job.status == "SUCCEEDED" else {}
        run = summary.get("run") or {}
        figure = record.utilisation["allocated_cpu"]
        result = {
            "zones": args.zones, "rows_per_zone": args.rows, "trainer": args.trainer, "job": job.status,
            "allocated_utilisation": figure, "goal": GOAL, "met": figure is not None and figure >= GOAL,
            "line": record.line(), "phases": record.phases, "counts": record.counts,
            "record_allocated_cpu_s": round(record.allocated.get("CPU", 0.0) * 3600, 2),
            "record_reserved_cpu_s": round(record.reserved.get("CPU", 0.0) * 3600, 2),
            "summary_task_cpu_s": (run.get("tasks") or {}).get("cpu_s"),
            "summary_trainer_cpu_s": run.get("trainer_cpu_s"), "timings_s": run.get("timings_s"),
            "not_available": record.not_available,
        }  # fmt: skip
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=2))
        print(json.dumps(result), flush=True)
        return 0
    finally:
        stop_head(head)


if __name__ == "__main__":
    raise SystemExit(main())

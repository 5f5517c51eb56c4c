"""The usage record's own cost on a job (figures in benchmarks/usage.md).

A local head (2 CPUs) runs ``--jobs`` jobs of ``--tasks`` short tasks and one actor each. For each
finished job it times what the record adds to the task: the price check before submit
(``check_prices_on_cluster``) and the collection after the end (``collect_usage``: five reads through a
``DashboardReader``, four at once, and the arithmetic). The reader is a plain ``requests`` one with the
head's token. It counts the head's processes before the job and after the collection (the record starts
no Ray process). Goal: <= 0.2 s added per job.

Run: ``python -m benchmarks.bench_usage`` (``--help`` for the knobs). Starts and stops its own head.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out" / "bench_usage.json"
JOB = """
import ray
ray.init()
@ray.remote(num_cpus=1)
def f(i):
    return i
@ray.remote(num_cpus=0)
class A:
    def ping(self):
        return 1
a = A.remote()
ray.get(a.ping.remote())
print(sum(ray.get([f.remote(i) for i in range({tasks})])))
"""


def _processes(pgid: int) -> int:
    import psutil

    count = 0
    for proc in psutil.process_iter(["pid"]):
        try:
            count += int(os.getpgid(proc.pid) == pgid)
        except (ProcessLookupError, PermissionError):
            continue
    return count


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print and write its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args(argv)

    from airflow_ray_provider.jobs.client import JobClient
    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.usage import (
        UsageOptions,
        check_prices_on_cluster,
        parse_prices,
        usage_line,
    )
    from airflow_ray_provider.launch.usage.observer import collect_usage
    from airflow_ray_provider.local import LocalHeadConfig, read_token, start_head, stop_head

    head = start_head(LocalHeadConfig(num_cpus=2, auth=True), name="bench-usage")
    try:
        token = read_token(head.token_file) if head.token_file else None
        client = JobClient(head.dashboard_url, token=token)
        reader = client.reader()  # what a run's usage record reads through: short timeout, no retry
        prices = parse_prices({"CPU": 0.05})
        assert prices is not None
        rows: list[dict[str, Any]] = []
        for _ in range(args.jobs):
            sid = f"bench_usage_{time.time_ns()}"
            before = _processes(head.pgid)
            client.submit(JobSpec(entrypoint=f"python -c '{JOB.format(tasks=args.tasks)}'"), sid)
            while not (job := client.get_job(sid)) or not job.is_terminal:
                time.sleep(0.2)
            request = UsageOptions(
                submission_id=sid, cluster="bench", mode="standing", own_cluster=True, prices=prices.to_dict()
            )
            started = time.perf_counter()
            check_prices_on_cluster(reader, prices)
            checked = time.perf_counter()
            record = collect_usage(reader, request)
            done = time.perf_counter()
            rows.append({
                "price_check_s": round(checked - started, 4), "collect_s": round(done - checked, 4),
                "added_s": round(done - started, 4), "tasks": record["counts"]["tasks"],
                "processes_before": before, "processes_after": _processes(head.pgid),
                "line": usage_line(record), "not_available": record["not_available"],
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
        added = [row["added_s"] for row in rows]
        summary = {
            "jobs": args.jobs, "tasks_per_job": args.tasks, "median_added_s": statistics.median(added),
            "max_added_s": max(added), "goal_s": 0.2, "met": max(added) <= 0.2,
            "extra_processes": max(r["processes_after"] - r["processes_before"] for r in rows), "runs": rows,
        }  # fmt: skip
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(summary, indent=2))
        print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), flush=True)
        return 0
    finally:
        stop_head(head)


if __name__ == "__main__":
    raise SystemExit(main())

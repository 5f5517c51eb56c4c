"""Benchmark: the evaluation reading from an S3 API server against the same files on local disk.

Both sides run the workload's CLI as a Ray job runs it (``python -m airflow_ray_provider.workloads.evaluate``,
a whole process: interpreter start, imports, the object-store check, model loading, reading, scoring,
metrics, writing the artifact), on the same Parquet log and joblib models of ``benchmarks.bench_evaluate``:

* **local**: data, models and ``output_uri`` are local paths;
* **s3**: the same files in a bucket of moto's S3 server on 127.0.0.1 (``tests/fixtures/s3.py``: IAM
  check on, configured through the AWS variables only), ``output_uri`` in the bucket too.

The sides take turns (local, s3, local, s3, ...) so that a change in the machine's load hits both; the
figure is each side's median and their ratio. moto keeps objects in its memory and answers over
loopback HTTP from one Python process, so this measures pyarrow's S3 client and the HTTP path, not a
real store's latency or bandwidth.

With ``--pin`` the S3 server runs on CPU 1 and every evaluation process, on both sides, on CPU 0: on a
2-core machine this keeps the server's CPU off the workload's core, so the ratio is the cost of the S3
path as a job sees it (a real store serves from other machines), not a loopback server's own work.

moto answers each HTTP range request by reading the whole object (``_range_get_s`` shows it), so the
files' size sets its cost; ``--rows-per-file`` writes the same rows in smaller files, on both sides.

Run: ``python -m benchmarks.bench_object_store [--rows 2000000] [--runs 3] [--engine auto] [--pin]
[--rows-per-file N]``; writes
``benchmarks/out/bench_object_store.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_evaluate import OUT, dataset


def _upload(server: Any, local: str, bucket: str, prefix: str) -> str:
    from tests.fixtures.s3 import upload_folder

    return upload_folder(server, local, bucket, prefix)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pin(pid: int, cpu: int) -> None:
    """Pin every thread of process ``pid`` (and so the threads it starts later) to ``cpu``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def _run(config: dict[str, Any], env: dict[str, str], cpu: int | None = None) -> tuple[float, float]:
    """One evaluation's wall seconds and its own CPU seconds (user + system, its threads and children)."""
    argv = [
        sys.executable,
        "-m",
        "airflow_ray_provider.workloads.evaluate",
        "--config-json",
        json.dumps(config),
    ]
    started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, preexec_fn=pin)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"evaluation failed ({done.returncode}):\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _range_get_s(server: Any, bucket: str, mib: int, gets: int = 8) -> float:
    """Seconds for ``gets`` reads of 1 MiB by HTTP range from one ``mib``-MiB object.

    moto answers a range request by reading the whole object and slicing it, so a range costs in
    proportion to the object's size (a real store's does not): the file layout decides moto's cost.
    """
    client = server.client()
    client.put_object(Bucket=bucket, Key=f"probe-{mib}", Body=os.urandom(mib << 20))
    started = time.monotonic()
    for index in range(gets):
        window = f"bytes={index << 20}-{((index + 1) << 20) - 1}"
        client.get_object(Bucket=bucket, Key=f"probe-{mib}", Range=window)["Body"].read()
    client.delete_object(Bucket=bucket, Key=f"probe-{mib}")
    return time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    """Run both sides ``--runs`` times each, taking turns, and print their medians and ratio."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_object_store")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", default="auto", choices=("auto", "local", "ray"))
    parser.add_argument("--pin", action="store_true", help="the S3 server on CPU 1, the evaluations on CPU 0")
    parser.add_argument(
        "--rows-per-file", type=int, default=None, help="rows per Parquet file (default 1,000,000)"
    )
    args = parser.parse_args(argv)
    from tests.fixtures.s3 import AWS_VARIABLES, start_s3_server, stop_s3_server

    os.makedirs(OUT, exist_ok=True)
    data, champion, challenger = dataset(args.rows, args.rows_per_file)
    work = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    proc, server = start_s3_server(work)
    if args.pin:
        _pin(server.pid, 1)
    try:
        bucket = server.make_bucket("bench")
        started = time.monotonic()
        s3 = {
            "data": _upload(server, data, bucket, "logs"),
            "champion": _upload(server, champion, bucket, "models/champion.joblib"),
            "challenger": _upload(server, challenger, bucket, "models/challenger.joblib"),
        }
        upload_s = time.monotonic() - started
        range_get_s = {f"{mib} MiB": round(_range_get_s(server, bucket, mib), 2) for mib in (160, 20)}
        base = {k: v for k, v in os.environ.items() if k not in AWS_VARIABLES}
        base.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        sides = {
            "local": (
                {"data": data, "champion": champion, "challenger": challenger},
                str(work / "out"),
                base,
            ),
            "s3": (s3, f"s3://{bucket}/out", {**base, **server.env()}),
        }
        walls: dict[str, list[float]] = {name: [] for name in sides}
        cpus: dict[str, list[float]] = {name: [] for name in sides}  # the evaluation process's own CPU
        server_cpu: list[float] = []  # the S3 server's CPU per s3 run: on loopback it shares the cores
        for run in range(args.runs):
            for name, (uris, out, env) in sides.items():
                config = {
                    "data_uri": uris["data"],
                    "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"]},
                    "models": {
                        "champion": {"uri": uris["champion"]},
                        "challenger": {"uri": uris["challenger"]},
                    },
                    "output_uri": f"{out}/{run}",
                    "bootstrap": {"samples": 0},
                    "engine": args.engine,
                    "progress_interval_s": 5,
                }
                before = _cpu_s(server.pid)
                wall, cpu = _run(config, env, 0 if args.pin else None)
                walls[name].append(wall)
                cpus[name].append(cpu)
                if name == "s3":
                    server_cpu.append(_cpu_s(server.pid) - before)
                print(
                    f"{name} run {run + 1}: {walls[name][-1]:.1f} s (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    finally:
        stop_s3_server(proc)
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(w) for name, w in walls.items()}
    result = {
        "rows": args.rows,
        "engine": args.engine,
        "pinned": args.pin,
        "files": len(list(Path(data).rglob("*.parquet"))),
        "dataset_bytes": sum(f.stat().st_size for f in Path(data).rglob("*.parquet")),
        "upload_s": round(upload_s, 1),
        "walls_s": {name: [round(w, 2) for w in ws] for name, ws in walls.items()},
        "median_s": {name: round(m, 2) for name, m in medians.items()},
        "ratio_s3_to_local": round(medians["s3"] / medians["local"], 3),
        "process_cpu_s": {name: [round(c, 2) for c in cs] for name, cs in cpus.items()},
        "cpu_ratio_s3_to_local": round(statistics.median(cpus["s3"]) / statistics.median(cpus["local"]), 3),
        "s3_server_cpu_s": [round(c, 2) for c in server_cpu],
        "eight_1_mib_range_gets_s": range_get_s,
    }
    with open(os.path.join(OUT, "bench_object_store.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result))
    print("| side | runs (s) | median (s) |\n| --- | --- | --- |")
    for name, ws in result["walls_s"].items():
        print(f"| {name} | {', '.join(f'{w:.1f}' for w in ws)} | {result['median_s'][name]:.1f} |")
    print(f"\ns3 / local: {result['ratio_s3_to_local']:.2f}x (goal < 1.3x)")
    print(f"S3 server CPU per s3 run: {', '.join(f'{c:.1f}' for c in server_cpu)} s")
    print(f"the evaluation's own CPU, s3 / local: {result['cpu_ratio_s3_to_local']:.2f}x")
    print(f"eight 1 MiB range GETs by object size: {range_get_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

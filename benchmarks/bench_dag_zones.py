"""Per-zone training DAG vs one mapped Airflow task per zone, measured side by side in one run.

Run: ``python -m benchmarks.bench_dag_zones [--zones 1000] [--rows 2000] [--baseline-zones 100]``.
Figures go to stdout and ``benchmarks/out/dag_zones.json``; see ``benchmarks/templates.md``.

Both DAGs run on the same real Airflow deployment, started here in a temporary ``AIRFLOW_HOME``:
scheduler with LocalExecutor (``parallelism=2``), dag-processor, triggerer and api-server, on SQLite
(Airflow 3.3 accepts LocalExecutor on SQLite; SQLite serialises the metadata writes, which a Postgres
deployment would not, so the baseline gets a little slower here than on Postgres).

* **provider**: ``build_zone_training_dag`` with one application of ``--zones`` zones x ``--rows`` rows
  (Ridge), on an ephemeral local Ray head: cluster start, the Ray job, manifest check, teardown.
* **mapped baseline**: one ``@task`` mapped over the zones; each task instance reads its zone's
  partition (hive-partitioned, so it reads only its own rows), fits the same built-in Ridge trainer
  and writes the model. Run at ``--baseline-zones`` zones and extrapolated linearly to ``--zones``.

Durations are the DAG runs' own ``end_date - start_date`` from the metadata DB.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).parent / "out"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))

MAPPED_DAG = """
from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

ZONES = {zones!r}

START = pendulum.datetime(2026, 1, 1, tz="UTC")
FEATURES = [f"f{{i}}" for i in range(10)]

with DAG("bench_mapped_zones", schedule=None, start_date=START, catchup=False):

    @task
    def fit_zone(zone: str) -> dict:
        import pickle

        import pyarrow.parquet as pq

        from airflow_ray_provider.workloads.common.artifacts import write_bytes_atomic
        from airflow_ray_provider.workloads.zone_training.trainers import load_trainer

        frame = pq.read_table({data!r} + "/zone=" + zone).to_pandas()
        frame["zone"] = zone
        model, metrics = load_trainer("ridge")(frame, label_column="y", feature_columns=FEATURES)
        write_bytes_atomic({out!r} + "/" + zone + ".joblib", pickle.dumps(model, protocol=5))
        return metrics

    fit_zone.expand(zone=ZONES)
"""

PROVIDER_DAG = """
from airflow_ray_provider.templates.common import ClusterSettings
from airflow_ray_provider.templates.zone_training import ZoneApplication, build_zone_training_dag

dag = build_zone_training_dag(
    dag_id="bench_provider_zones",
    applications=[ZoneApplication(name="bench", data_uri={data!r}, zone_column="zone", label_column="y",
                                  trainer="ridge", max_failed_fraction=0.0)],
    output_uri={out!r},
    cluster=ClusterSettings(local_options={{"num_cpus": 2}}),
    retry_failed_zones=True,
    deferrable=True,
)
"""


def _env(home: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API_AUTH__JWT_SECRET": "bench-secret",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


class AirflowStack:
    """api-server, scheduler, dag-processor and triggerer in one process group of our own."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.env, self.procs = home, _env(home, port), []  # type: ignore[var-annotated]

    def start(self) -> None:
        subprocess.run([AIRFLOW, "db", "migrate"], env=self.env, check=True, capture_output=True)
        log = open(self.home / "stack.log", "wb")  # noqa: SIM115 (closed with the processes)
        commands = [
            ["api-server", "--port", self.env["AIRFLOW__API__PORT"]],
            ["scheduler"],
            ["dag-processor"],
        ]
        for cmd in [*commands, ["triggerer"]]:
            proc = subprocess.Popen(
                [AIRFLOW, *cmd], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            self.procs.append(proc)

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def query(self, sql: str, *args: Any) -> list[tuple]:
        with sqlite3.connect(f"file:{self.home}/airflow.db?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql, args).fetchall()

    def run_dag(self, dag_id: str, timeout: float) -> dict[str, Any]:
        """Wait until the DAG is parsed, trigger it, wait for the run; return its timings."""
        deadline = time.monotonic() + timeout
        while not self.query("SELECT 1 FROM dag WHERE dag_id = ? AND is_stale = 0", dag_id):
            _check_deadline(deadline, f"{dag_id} was not parsed")
            time.sleep(2)
        subprocess.run([AIRFLOW, "dags", "trigger", dag_id], env=self.env, check=True, capture_output=True)
        while True:
            rows = self.query(
                "SELECT state, start_date, end_date, run_id FROM dag_run WHERE dag_id = ?", dag_id
            )
            if rows and rows[-1][0] in ("success", "failed"):
                break
            _check_deadline(deadline, f"{dag_id} did not finish")
            time.sleep(2)
        state, start, end, run_id = rows[-1]
        tis = self.query(
            "SELECT state, julianday(end_date) - julianday(start_date) FROM task_instance "
            "WHERE dag_id = ? AND run_id = ?", dag_id, run_id,
        )  # fmt: skip
        durations = [d * 86400 for s, d in tis if d is not None and s == "success"]
        return {
            "state": state, "seconds": _seconds(start, end), "task_instances": len(tis),
            "succeeded": sum(1 for s, _ in tis if s == "success"),
            "mean_task_s": sum(durations) / len(durations) if durations else None,
        }  # fmt: skip


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} in time; see the stack log")


def _seconds(start: str, end: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _free_port() -> int:
    from airflow_ray_provider.local import free_port

    return free_port()


def prepare(work: Path, zones: int, rows: int, baseline_zones: int) -> dict[str, str]:
    """Write both datasets and both DAG files."""
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    big = make_zone_dataset(str(work / "zones.parquet"), zones, rows, 10, 0)
    small = str(work / "zones_partitioned")
    make_zone_dataset(small, baseline_zones, rows, 10, 0, partitioned=True)
    dags = work / "home" / "dags"
    dags.mkdir(parents=True)
    names = [f"z{i:05d}" for i in range(baseline_zones)]
    (dags / "bench_mapped_zones.py").write_text(
        MAPPED_DAG.format(zones=names, data=small, out=str(work / "mapped"))
    )
    (dags / "bench_provider_zones.py").write_text(PROVIDER_DAG.format(data=big, out=str(work / "provider")))
    return {"provider_data": big, "baseline_data": small}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; prints the figures and writes ``benchmarks/out/dag_zones.json``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_dag_zones")
    parser.add_argument("--zones", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--baseline-zones", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="arp-bench-dag-") as tmp:
        work = Path(tmp)
        prepare(work, args.zones, args.rows, args.baseline_zones)
        stack = AirflowStack(work / "home", _free_port())
        stack.start()
        try:
            mapped = stack.run_dag("bench_mapped_zones", args.timeout)
            provider = stack.run_dag("bench_provider_zones", args.timeout)
        finally:
            stack.stop()
            _stop_leftover_heads()
    per_zone = mapped["seconds"] / args.baseline_zones
    extrapolated = per_zone * args.zones
    result = {
        "zones": args.zones, "rows_per_zone": args.rows, "baseline_zones": args.baseline_zones,
        "provider": provider, "mapped_baseline": mapped,
        "mapped_per_zone_s": per_zone, "mapped_extrapolated_s": extrapolated,
        "speedup": extrapolated / provider["seconds"] if provider["seconds"] else None,
        "load_before": load_before, "load_after": os.getloadavg(), "cpus": os.cpu_count(),
    }  # fmt: skip
    _print(result)
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "dag_zones.json").write_text(json.dumps(result, indent=2))
    ok = provider["state"] == mapped["state"] == "success"
    return 0 if ok else 1


def _stop_leftover_heads() -> None:
    """Stop any local head the provider DAG's teardown left (it normally stops its own)."""
    from airflow_ray_provider.clusters.local import list_clusters, stop_cluster
    from airflow_ray_provider.kuberay import LABEL_DAG_ID
    from airflow_ray_provider.local import LocalHeadInfo

    for record in list_clusters({LABEL_DAG_ID: "bench_provider_zones"}):
        stop_cluster(LocalHeadInfo.from_dict(record["info"]))


def _print(result: dict[str, Any]) -> None:
    p, m = result["provider"], result["mapped_baseline"]
    size = f"{result['zones']} zones x {result['rows_per_zone']} rows"
    print(f"provider DAG, {size}: {p['seconds']:.1f} s ({p['state']})")
    print(
        f"mapped baseline, {result['baseline_zones']} zones: {m['seconds']:.1f} s ({m['state']}; "
        f"{result['mapped_per_zone_s']:.2f} s/zone, mean task {m['mean_task_s'] or 0:.2f} s)"
    )
    print(f"mapped baseline extrapolated to {result['zones']} zones: {result['mapped_extrapolated_s']:.0f} s")
    print(f"speedup: {result['speedup']:.1f}x (goal: >= 50x)")
    print(f"load average {result['load_before']} -> {result['load_after']} on {result['cpus']} CPUs")


if __name__ == "__main__":
    sys.exit(main())

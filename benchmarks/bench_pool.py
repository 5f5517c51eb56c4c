"""A pool against a cluster per task: N mapped Airflow tasks, each evaluating the same log slice.

Run: ``python -m benchmarks.bench_pool [--tasks 20] [--rows 200000] [--sides one_task,pool]``.
Figures go to stdout and ``benchmarks/out/pool.json``; see ``benchmarks/cluster.md``.

Both sides run one DAG of ``--tasks`` mapped ``EphemeralRayJobOperator`` tasks through ``dag.test()`` (real
Airflow on SQLite in a temporary ``AIRFLOW_HOME``, one process per side, run by turns), each task running
the evaluation workload (``python -m airflow_ray_provider.workloads.evaluate``, in-process engine, 2
models) on a ``--rows`` click log on the local backend (2 logical CPUs; each job's entrypoint declares both,
``entrypoint_num_cpus=2``, so jobs on the pool queue in Ray rather than share the cores):

* **one_task**: every task starts its own local Ray head, runs its job and stops the head (what a user
  writes without pools);
* **pool**: every task leases the pool ``bench-pool`` (``idle_ttl`` 600 s): the first task starts the head,
  the others find it warm. The head is stopped after the run (not counted).

Per side: the whole process's wall, the DAG run's wall (``end_date - start_date``), the Ray heads started
(distinct cluster names in the usage records), the sum of the records' reserved CPU-seconds, and per task
the seconds from the task instance's start (metadata DB) to its entrypoint's start (the record's
``driver_started``). Goals (docs: ``benchmarks/README.md``): the pool's DAG wall <= 0.5x one_task's; on a
warm pool the entrypoint starts <= 2 s after the task starts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).parent / "out"
POOL = "bench-pool"

DAG = """
import sys

import pendulum
from airflow.sdk import DAG

from airflow_ray_provider.operators import EphemeralRayJobOperator

CONFIGS = {configs!r}
with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    EphemeralRayJobOperator.partial(
        task_id="evaluate", local_options={{"num_cpus": 2}}, poll_interval=0.3, cluster_pool={pool!r},
        entrypoint_num_cpus=2,
    ).expand(
        entrypoint=[[sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", c]
                    for c in CONFIGS]
    )
"""


def _environment(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_RAY_LOCAL_REGISTRY": str(home / "registry"),
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def _prepare(home: Path, rows: int, tasks: int) -> list[str]:
    """The click log, the two models and one evaluation config per task (each its own output)."""
    from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset, make_models

    data = make_eval_dataset(str(home / "data"), rows, zones=20, features=16, group_size=20, seed=3)
    champion, challenger = make_models(str(home / "models"))
    columns = {"label": "clicked", "group": "request_id", "slices": ["zone"]}
    return [
        json.dumps(
            {
                "data_uri": data,
                "output_uri": str(home / "out" / f"task-{index}"),
                "columns": columns,
                "models": {"champion": {"uri": champion}, "challenger": {"uri": challenger}},
            }
        )
        for index in range(tasks)
    ]


def _side(side: str, home: Path) -> dict[str, Any]:
    """Run one side's DAG in this process (``--run-side``) and read what its run left."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    spec = importlib.util.spec_from_file_location(f"bench_{side}", home / "dags" / f"bench_{side}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.dag
    started = time.perf_counter()
    dag_run = dag.test()
    wall = time.perf_counter() - started
    records, to_entrypoint = [], []
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.run_id == dag_run.run_id,
                                                 TaskInstance.dag_id == dag.dag_id).all()  # fmt: skip
        for ti in sorted(tis, key=lambda t: t.map_index):
            key = {"run_id": dag_run.run_id, "dag_id": dag.dag_id, "task_id": ti.task_id}
            row = session.query(XComModel).filter_by(**key, map_index=ti.map_index, key="usage").one_or_none()
            usage = XComModel.deserialize_value(row) if row is not None else {}
            records.append(usage)
            driver = (usage.get("times") or {}).get("driver_started")
            if driver and ti.start_date:
                to_entrypoint.append(round(driver - ti.start_date.timestamp(), 3))
    return {
        "side": side,
        "state": str(dag_run.state),
        "dag_wall_s": round((dag_run.end_date - dag_run.start_date).total_seconds(), 2),
        "test_wall_s": round(wall, 2),
        "heads_started": len({r.get("cluster") for r in records if r}),
        "reserved_cpu_s": round(sum((r.get("reserved") or {}).get("CPU", 0.0) for r in records) * 3600, 1),
        "task_to_entrypoint_s": to_entrypoint,
    }


def _stop_heads(env: dict[str, str]) -> None:
    code = ("from airflow_ray_provider.local import LocalHeadInfo\n"
            "from airflow_ray_provider.clusters.local import list_clusters, stop_cluster\n"
            "for r in list_clusters(): stop_cluster(LocalHeadInfo.from_dict(r['info']))")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--sides", default="one_task,pool")
    parser.add_argument("--run-side", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_side:
        print("RESULT " + json.dumps(_side(args.run_side, Path(args.home))))
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="bpool", dir="/tmp") as folder:
        home = Path(folder)
        env = _environment(home)
        (home / "dags").mkdir()
        configs = _prepare(home, args.rows, args.tasks)
        for side in args.sides.split(","):
            pool = {"name": POOL, "idle_ttl": 600} if side == "pool" else None
            source = DAG.format(configs=configs, dag_id=f"bench_{side}", pool=pool)
            (home / "dags" / f"bench_{side}.py").write_text(source)
        subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        load = os.getloadavg()[0]
        try:
            for side in args.sides.split(","):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.bench_pool", "--run-side", side, "--home", folder],
                    env=env, capture_output=True, text=True, check=False,
                )  # fmt: skip
                line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"side {side} failed (exit {done.returncode})")
                result = {**json.loads(line[7:]), "process_wall_s": round(time.perf_counter() - started, 2)}
                waits = result["task_to_entrypoint_s"]
                result["task_to_entrypoint_median_s"] = statistics.median(waits) if waits else None
                result["task_to_entrypoint_warm_max_s"] = max(waits[1:]) if len(waits) > 1 else None
                results.append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "task_to_entrypoint_s"}))
        finally:
            _stop_heads(env)
        summary = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_1m": load,
                   "tasks": args.tasks, "rows": args.rows, "sides": results}  # fmt: skip
        by_side = {r["side"]: r for r in results}
        if {"one_task", "pool"} <= set(by_side):
            summary["pool_over_one_task_dag_wall"] = round(
                by_side["pool"]["dag_wall_s"] / by_side["one_task"]["dag_wall_s"], 3
            )
            print("pool / one_task DAG wall:", summary["pool_over_one_task_dag_wall"])
        OUT_DIR.mkdir(exist_ok=True)
        (OUT_DIR / "pool.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

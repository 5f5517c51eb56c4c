"""Zone training end to end, whole processes on both sides (issue 12): plain script vs CLI vs job.

Run: ``python -m benchmarks.bench_zone_e2e [--zones 1000] [--rows 2000] [--repeats 1]
[--variants baseline,cli,cli_ray,job]``; figures go to stdout and
``benchmarks/out/zone_e2e_<zones>.json`` with ``uptime`` before and after.

Same Parquet file (shuffled rows, 10 float features), same per-zone work (Ridge on 80 % of the rows,
rmse/mae/r2 on the rest), same outputs (the models bundled, ``manifest.parquet``, ``summary.json``,
``_SUCCESS``) on every side, each timed as a whole process from the outside:

* ``baseline``: ``python -m benchmarks.zone_baseline`` (pandas + ``groupby`` +
  ``joblib.Parallel(n_jobs=2)``), interpreter start to exit;
* ``cli``: ``python -m airflow_ray_provider.workloads.zone_training --config-json ...`` standalone with
  ``engine: auto`` (the local engine: worker processes, no Ray), interpreter start to exit;
* ``cli_ray``: the same with ``engine: ray`` (it starts and stops its own private Ray);
* ``job``: the same command submitted as a Ray job to a local head started beforehand (the DAG path),
  from ``submit_job`` to the status ``SUCCEEDED`` (polled every 0.1 s). The head is started, ready,
  before the clock starts and shared by the job repeats; the first job is the first this head runs.

Ratios are project wall / baseline wall. Utilisation = sum of per-fit CPU (``cpu_s`` in each
manifest) / (wall x cores). The variants run one after another, in the order baseline, cli, job, so
machine load hits them in turn: the load is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

OUT_DIR = os.path.join(os.path.dirname(__file__), "out")
CORES = 2


def zone_config(data: str, out: str, engine: str = "auto") -> dict[str, Any]:
    """The zone-training CLI's config of these runs: Ridge, bundled models."""
    return {
        "engine": engine,
        "application": "bench",
        "data_uri": data,
        "zone_column": "zone",
        "label_column": "y",
        "output_uri": out,
        "trainer": "ridge",
        "trainer_kwargs": {"alpha": 1.0},
        "artifacts": "bundled",
    }


def _manifest_cpu(out: str) -> tuple[int, float, dict[str, float]]:
    """(zones succeeded, summed fit CPU seconds, zone -> r2) of a run's manifest."""
    import pyarrow.parquet as pq

    rows = pq.read_table(os.path.join(out, "manifest.parquet")).to_pylist()
    ok = [r for r in rows if r["status"] == "succeeded"]
    r2 = {r["zone"]: json.loads(r["metrics"])["r2"] for r in ok}
    return len(ok), sum(r["cpu_s"] for r in ok), r2


def run_process(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run ``cmd`` to completion; return its wall seconds and its stdout."""
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=900)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, done.stdout


def bench_baseline(data: str, out: str, env: dict[str, str]) -> dict[str, Any]:
    wall, stdout = run_process([sys.executable, "-m", "benchmarks.zone_baseline", data, out], env)
    return {"wall_s": wall, "internal": json.loads(stdout.strip().splitlines()[-1])}


def bench_cli(data: str, out: str, env: dict[str, str], engine: str = "auto") -> dict[str, Any]:
    cmd = [sys.executable, "-m", "airflow_ray_provider.workloads.zone_training"]
    wall, _ = run_process([*cmd, "--config-json", json.dumps(zone_config(data, out, engine))], env)
    return {"wall_s": wall, "summary": _summary(out)}


def bench_job(client: Any, data: str, out: str) -> dict[str, Any]:
    """Submit the CLI as a Ray job; wall from submit to SUCCEEDED."""
    import shlex

    from ray.job_submission import JobStatus

    cmd = [sys.executable, "-m", "airflow_ray_provider.workloads.zone_training"]
    entrypoint = shlex.join([*cmd, "--config-json", json.dumps(zone_config(data, out))])
    started = time.perf_counter()
    sid = client.submit_job(entrypoint=entrypoint)
    while not (status := client.get_job_status(sid)).is_terminal():
        time.sleep(0.1)
    wall = time.perf_counter() - started
    if status != JobStatus.SUCCEEDED:
        raise RuntimeError(f"job {sid} {status}: {client.get_job_logs(sid)[-3000:]}")
    return {"wall_s": wall, "summary": _summary(out)}


def _summary(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return {
        "engine": (summary["run"].get("engine") or {}).get("name"),
        "duration_s": summary["duration_s"],
        **summary["run"]["timings_s"],
        "tasks": summary["run"]["tasks"],
    }


def _with_figures(result: dict[str, Any], out: str, base_r2: dict[str, float] | None) -> dict[str, Any]:
    zones, cpu, r2 = _manifest_cpu(out)
    result.update(
        zones=zones, fit_cpu_s=round(cpu, 3), utilisation=round(cpu / (result["wall_s"] * CORES), 3)
    )
    if base_r2 is not None:
        result["max_r2_diff_vs_baseline"] = max(abs(r2[z] - base_r2[z]) for z in base_r2)
    return result


def run(work: str, zones: int, rows: int, repeats: int, variants: list[str]) -> dict[str, Any]:
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    data = make_zone_dataset(os.path.join(work, "zones.parquet"), zones, rows, features=10, seed=0)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in ("baseline", "cli", "cli_ray", "job")}
    base_r2: dict[str, float] | None = None
    for i in range(repeats):
        out = os.path.join(work, f"baseline-{i}")
        results["baseline"].append(_with_figures(bench_baseline(data, out, env), out, None))
        base_r2 = _manifest_cpu(out)[2]
        print(json.dumps({"baseline": results["baseline"][-1]}), flush=True)
        for variant, engine in (("cli", "auto"), ("cli_ray", "ray")):
            if variant not in variants:
                continue
            out = os.path.join(work, f"{variant}-{i}")
            try:
                results[variant].append(_with_figures(bench_cli(data, out, env, engine), out, base_r2))
            except RuntimeError as exc:  # e.g. Ray's own start-up timeout on an overloaded machine: recorded
                results[variant].append({"error": str(exc)[-600:]})
            print(json.dumps({variant: results[variant][-1]}), flush=True)
    if "job" in variants:
        results["job"] = bench_jobs(work, data, env, repeats, base_r2)
    return results


def bench_jobs(
    work: str, data: str, env: dict[str, str], repeats: int, base_r2: dict[str, float] | None
) -> list[dict[str, Any]]:
    """The CLI as Ray jobs on a local head started (and ready) beforehand."""
    from airflow_ray_provider.local import LocalHeadConfig, start_head, stop_head

    config = LocalHeadConfig(num_cpus=CORES, auth=False, temp_root=work, env=env, ready_timeout=600)
    head = start_head(config, name="bench-zone-e2e")
    runs = []
    try:
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(head.dashboard_url)
        for i in range(repeats):
            out = os.path.join(work, f"job-{i}")
            runs.append(_with_figures(bench_job(client, data, out), out, base_r2))
            print(json.dumps({"job": runs[-1]}), flush=True)
    finally:
        stop_head(head)
    return runs


def _ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    base = min(r["wall_s"] for r in results["baseline"])
    best = {
        k: min((r["wall_s"] for r in v if "wall_s" in r), default=float("nan")) for k, v in results.items()
    }
    ratios: dict[str, Any] = {"baseline_wall_s": round(base, 3)}
    for variant in ("cli", "cli_ray", "job"):
        ratios[f"{variant}_wall_s"] = round(best[variant], 3)
        ratios[f"{variant}_over_baseline"] = round(best[variant] / base, 3)
    return ratios


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """Run the three variants and print/save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zones", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant (best wall reported)")
    parser.add_argument(
        "--variants", default="baseline,cli,cli_ray,job", help="comma-separated; baseline always"
    )
    args = parser.parse_args(argv)
    before = _uptime()
    work = tempfile.mkdtemp(prefix="zb-", dir="/tmp")
    try:
        results = run(work, args.zones, args.rows, args.repeats, args.variants.split(","))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "zones": args.zones,
        "rows_per_zone": args.rows,
        "uptime_before": before,
        "uptime_after": _uptime(),
        "ratios": _ratios(results),
        "runs": results,
    }
    print(json.dumps(record["ratios"]))
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, f"zone_e2e_{args.zones}.json"), "w") as f:
        json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

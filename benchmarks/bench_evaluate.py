"""Benchmark: the evaluation workload vs the plain pandas/scikit-learn script a user would write.

Every figure is a whole-process wall clock (interpreter start, imports, model loading, reading, scoring,
metrics, writing ``metrics.json``), on the same data and models, with the same metrics on both sides
(accuracy, ROC AUC, log loss, mean predicted / observed CTR, NDCG@5/10; overall and per zone):

* **plain script**: ``python -m benchmarks.eval_plain_script`` (pandas + scikit-learn, one process);
* **CLI standalone**: ``python -m airflow_ray_provider.workloads.evaluate`` with no Ray running (with
  ``engine: auto`` it picks its engine and logs why; ``engine: ray`` starts a private local Ray);
* **job on a running head**: a local head (2 CPUs) is started and ready first; the figure is submit ->
  ``SUCCEEDED`` with ``_SUCCESS`` written (the DAG's path), polled every 0.1 s.

The paired bootstrap is off by default (``--bootstrap 0``) because the plain script has none; with
``--bootstrap 200`` the project does strictly more work than the baseline. Memory: the peak of the summed
RSS and PSS of each side's process tree (for a job: the head's whole process group), sampled every 0.2 s.

``--baseline DIR`` (a checkout of main, e.g. ``git worktree add --detach DIR main``) runs every project
side twice in the same run, this checkout's code and ``DIR``'s (by ``PYTHONPATH``, with this venv), back
to back, and prints their ratios (this / baseline) for the wall clock, first scored row and finalize.

Run: ``python -m benchmarks.bench_evaluate [--rows 5000000] [--sides plain cli_auto cli_local cli_ray
job_auto job_local job_ray] [--baseline DIR]``; writes ``benchmarks/out/bench_evaluate.json`` and prints
Markdown tables.
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
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
ZONES, FEATURES, GROUP_SIZE = 200, 16, 20
SIDES = ("plain", "cli_auto", "cli_local", "cli_ray", "job_auto", "job_local", "job_ray")
#: The code a project side runs: ``None`` this checkout, else a baseline checkout's folder.
Code = str | None
PHASE_COLUMNS = ("preflight_s", "ray_init_s", "actor_startup_s", "first_row_s", "scoring_s", "finalize_s")


def dataset(rows: int, rows_per_file: int | None = None) -> tuple[str, str, str]:
    """Cached data and models for ``rows`` rows (in files of ``rows_per_file`` rows, else the default)."""
    from airflow_ray_provider.workloads.samples.click_log import CHUNK_ROWS, make_eval_dataset, make_models

    per_file = rows_per_file or CHUNK_ROWS
    data = os.path.join(OUT, f"data-{rows}" + ("" if per_file == CHUNK_ROWS else f"-per-file-{per_file}"))
    models = os.path.join(OUT, "models")
    if not os.path.exists(os.path.join(data, "_DONE")):
        shutil.rmtree(data, ignore_errors=True)
        make_eval_dataset(
            data, rows, zones=ZONES, features=FEATURES, group_size=GROUP_SIZE, seed=0, rows_per_file=per_file
        )
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


def _run_child(
    argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[str, int, int, float]:
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
    )
    with TreeSampler(proc.pid) as sampler:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({proc.returncode}):\n{out[-3000:]}")
    return out, sampler.peak_rss, sampler.peak_pss, time.monotonic() - start


def run_plain(rows: int) -> dict[str, Any]:
    """The plain script in its own process."""
    data, champion, challenger = dataset(rows)
    out_dir = os.path.join(OUT, f"plain-{rows}")
    argv = [sys.executable, "-m", "benchmarks.eval_plain_script", data, champion, challenger, out_dir]
    _, rss, pss, wall = _run_child(argv)
    return {"wall_s": wall, "peak_rss_gb": rss / 1e9, "peak_pss_gb": pss / 1e9, "out": out_dir}


def eval_config(rows: int, engine: str, out_dir: str, bootstrap: int) -> dict[str, Any]:
    """The workload's config for the benchmark data."""
    data, champion, challenger = dataset(rows)
    return {
        "data_uri": data,
        "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"]},
        "models": {"champion": {"uri": champion}, "challenger": {"uri": challenger}},
        "output_uri": out_dir,
        "bootstrap": {"samples": bootstrap},
        "engine": engine,
        "progress_interval_s": 5,
    }


def _project_result(out_dir: str, wall: float, rss: int, pss: int) -> dict[str, Any]:
    with open(os.path.join(out_dir, "metrics.json")) as fh:
        doc = json.load(fh)
    return {
        "wall_s": wall,
        "peak_rss_gb": rss / 1e9,
        "peak_pss_gb": pss / 1e9,
        "engine": doc["run"]["engine"],
        "timings": doc["run"]["timings"],
        "out": out_dir,
    }


def _label(code: Code) -> str:
    return "base" if code else "this"


def run_cli(rows: int, engine: str, bootstrap: int, code: Code = None) -> dict[str, Any]:
    """The evaluation CLI with no Ray running (a private local Ray if it picks Ray)."""
    tmp = tempfile.mkdtemp(prefix="arpbe-", dir="/tmp")
    out_dir = os.path.join(OUT, f"cli-{engine}-{rows}-{_label(code)}")
    cfg = eval_config(rows, engine, out_dir, bootstrap)
    env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    if code:  # ``-m`` puts the working directory first on sys.path: run there
        env["PYTHONPATH"] = code
    argv = [sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(cfg)]
    try:
        _, rss, pss, wall = _run_child(argv, env, cwd=code)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _project_result(out_dir, wall, rss, pss)


def run_job(head: Any, rows: int, engine: str, bootstrap: int, code: Code = None) -> dict[str, Any]:
    """One job on the running head: submit -> SUCCEEDED with ``_SUCCESS`` written."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    from airflow_ray_provider.local import read_token

    out_dir = os.path.join(OUT, f"job-{engine}-{rows}-{_label(code)}")
    shutil.rmtree(out_dir, ignore_errors=True)
    cfg = eval_config(rows, engine, out_dir, bootstrap)
    command = [
        sys.executable,
        "-m",
        "airflow_ray_provider.workloads.evaluate",
        "--config-json",
        json.dumps(cfg),
    ]
    entrypoint = shlex.join(command)  # this venv's Python, whatever the head's PATH says
    if code:
        entrypoint = f"cd {shlex.quote(code)} && PYTHONPATH={shlex.quote(code)} {entrypoint}"
    client = JobSubmissionClient(
        head.dashboard_url, headers={"Authorization": f"Bearer {read_token(head.token_file)}"}
    )
    with TreeSampler(head.pid) as sampler:
        started = time.monotonic()
        job = client.submit_job(entrypoint=entrypoint)
        while True:
            status = client.get_job_status(job)
            if status.is_terminal():
                break
            time.sleep(0.1)
        while status == JobStatus.SUCCEEDED and not os.path.exists(os.path.join(out_dir, "_SUCCESS")):
            time.sleep(0.05)
        wall = time.monotonic() - started
    if status != JobStatus.SUCCEEDED:
        raise RuntimeError(f"job {job} ended {status}:\n{client.get_job_logs(job)[-3000:]}")
    return _project_result(out_dir, wall, sampler.peak_rss, sampler.peak_pss)


def same_metrics(plain_out: str, project_out: str) -> float:
    """Largest absolute difference between the two sides' overall metrics (a check they did the same work)."""
    with open(os.path.join(plain_out, "metrics.json")) as fh:
        plain = json.load(fh)["metrics"]
    with open(os.path.join(project_out, "metrics.json")) as fh:
        project = json.load(fh)["metrics"]
    return max(abs(v - project[m][k]) for m in plain for k, v in plain[m].items())


def _attempt(func: Any, *args: Any) -> dict[str, Any]:
    """Run one side; a failure (e.g. Ray timing out at start-up under load) is recorded, not hidden."""
    try:
        return cast("dict[str, Any]", func(*args))
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[-500:]}"}


def run_size(rows: int, sides: Sequence[str], bootstrap: int, baseline: Code = None) -> dict[str, Any]:
    """Every requested side at one size, back to back (with ``baseline``: each project side on this code,
    then on the baseline's); the head is started (and ready) before the jobs, and one untimed job warms it."""
    from airflow_ray_provider.local import LocalHeadConfig, start_head, stop_head

    entry: dict[str, Any] = {"rows": rows, "bootstrap": bootstrap, "uptime_before": _uptime(), "sides": {}}
    codes: list[Code] = [None, baseline] if baseline else [None]
    for side in sides:
        if side == "plain":
            entry["sides"]["plain"] = _attempt(run_plain, rows)
        elif side.startswith("cli_"):
            for code in codes:
                entry["sides"][_key(side, code)] = _attempt(run_cli, rows, side[4:], bootstrap, code)
    jobs = [side for side in sides if side.startswith("job_")]
    if jobs:
        head = start_head(LocalHeadConfig(num_cpus=2, auth=True), name=f"bench-eval-{os.getpid()}")
        try:
            # The first job on a fresh head pays its warm-up (the same code measured against itself read
            # 1.12x for whichever side ran first): one untimed job first, kept apart in the JSON.
            warmup = _attempt(run_job, head, rows, jobs[0][4:], bootstrap, None)
            entry["warmup_job"] = {k: warmup[k] for k in ("wall_s",) if k in warmup}
            for side in jobs:
                for code in codes:
                    entry["sides"][_key(side, code)] = _attempt(
                        run_job, head, rows, side[4:], bootstrap, code
                    )
        finally:
            stop_head(head)
    plain = entry["sides"].get("plain")
    for side, result in entry["sides"].items():
        if plain and "wall_s" in plain and side != "plain" and "wall_s" in result:
            result["ratio_to_plain"] = result["wall_s"] / plain["wall_s"]
            result["max_abs_metric_diff"] = same_metrics(plain["out"], result["out"])
    entry["uptime_after"] = _uptime()
    return entry


def _key(side: str, code: Code) -> str:
    return f"{side}@{_label(code)}" if code else side


def metric_diff(out_a: str, out_b: str) -> float:
    """Largest absolute difference between two project runs' metrics (overall and per slice)."""
    docs = []
    for out in (out_a, out_b):
        with open(os.path.join(out, "metrics.json")) as fh:
            docs.append(json.load(fh))
    a, b = (d["metrics"] for d in docs)
    diffs = [
        abs(v - b[m][k])
        for m in a
        for k, v in a[m].items()
        if isinstance(v, float) and isinstance(b[m].get(k), float)
    ]
    return max(diffs, default=0.0)


def _comparison(results: list[dict[str, Any]]) -> str:
    """This code against the baseline, side by side: wall, first row, finalize, PSS (ratio this / base)."""
    lines = [
        "| rows | side | engine this / base | wall s this / base (ratio) | first row s (ratio) "
        "| finalize s (ratio) | peak PSS GB this / base | max metric diff vs ray (this) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def pair(a: Any, b: Any) -> str:
        if a is None or b is None:
            return "-"
        return f"{a:.2f} / {b:.2f} ({a / b:.2f}x)" if b else f"{a:.2f} / {b:.2f}"

    for r in results:
        sides = r["sides"]
        for side, this in sides.items():
            base = sides.get(f"{side}@base")
            if "@" in side or base is None or "error" in this or "error" in base:
                continue
            t, tb = this.get("timings", {}), base.get("timings", {})
            ray_out = sides.get("cli_ray", {}).get("out")
            diff = f"{metric_diff(this['out'], ray_out):.1e}" if ray_out and "out" in this else "-"
            lines.append(
                f"| {r['rows']:,} | {side} | {this['engine']['name']} / {base['engine']['name']} "
                f"| {pair(this['wall_s'], base['wall_s'])} "
                f"| {pair(t.get('first_row_s'), tb.get('first_row_s'))} "
                f"| {pair(t.get('finalize_s'), tb.get('finalize_s'))} "
                f"| {this['peak_pss_gb']:.2f} / {base['peak_pss_gb']:.2f} | {diff} |"
            )
    return "\n".join(lines)


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "n/a"


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| rows | side | engine | process wall s | / plain | preflight s | Ray init s | actor start-up s "
        "| first row s | scoring s | finalize s | peak RSS GB (PSS) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def fmt(value: Any) -> str:
        return "-" if value is None else f"{value:.1f}"

    for r in results:
        for side, s in r["sides"].items():
            if "error" in s:
                error = " ".join(s["error"].split())[-120:]
                lines.append(f"| {r['rows']:,} | {side} | failed: {error} |")
                continue
            t = s.get("timings", {})
            ratio = f"{s['ratio_to_plain']:.2f}x" if "ratio_to_plain" in s else "-"
            engine = s.get("engine", {}).get("name", "-")
            phases = " | ".join(fmt(t.get(k)) for k in PHASE_COLUMNS)
            lines.append(
                f"| {r['rows']:,} | {side} | {engine} | {s['wall_s']:.1f} | {ratio} | {phases} "
                f"| {s['peak_rss_gb']:.2f} ({s['peak_pss_gb']:.2f}) |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark at each ``--rows`` size and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_evaluate")
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--bootstrap", type=int, default=0, help="bootstrap samples on the project side")
    parser.add_argument("--baseline", help="a checkout of main: every project side also runs its code")
    args = parser.parse_args(argv)
    baseline = os.path.abspath(args.baseline) if args.baseline else None
    os.makedirs(OUT, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    results = []
    for rows in args.rows:
        dataset(rows)
        results.append(run_size(rows, args.sides, args.bootstrap, baseline))
        print(json.dumps(results[-1]), flush=True)
    with open(os.path.join(OUT, "bench_evaluate.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    print(_table(results))
    if baseline:
        print()
        print(_comparison(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

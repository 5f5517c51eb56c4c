"""Local ephemeral cluster: start-to-ready and teardown, provider vs a bare ``ray start --head``.

Run: ``python -m benchmarks.bench_cluster [--iterations N] [--num-cpus N]``. Writes
``benchmarks/out/cluster.json`` and prints the medians and the ratios (goal: provider / bare <= 1.2).

The bare baseline is ``ray start --head --block`` in its own temp dir and process group, ready when its
dashboard's ``/api/version`` answers, stopped by SIGTERM to that process group and a wait until the group
is gone. A plain ``ray stop`` is never run: it kills every Ray process on the machine, other users' too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_ray_provider.clusters.local import LocalPlan, start_cluster, stop_cluster
from airflow_ray_provider.local import LocalClusterOptions, free_port

OUT = Path(__file__).resolve().parent / "out" / "cluster.json"
GOAL = 1.2


def ray_executable() -> str:
    """The ``ray`` command of this Python environment (else the one on ``PATH``), as a user would run it."""
    candidate = Path(sys.executable).with_name("ray")
    found = str(candidate) if candidate.exists() else shutil.which("ray")
    if not found:
        raise SystemExit("the `ray` command was not found; install ray[default]")
    return found


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    for entry in Path("/proc").iterdir():  # zombies (exited, unreaped) do not count as running
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return False
    return True


def provider_grace_s() -> float:
    """The SIGTERM-to-SIGKILL grace the provider's teardown uses: the bare side gets the same one."""
    import inspect

    from airflow_ray_provider.local import stop_head

    return float(inspect.signature(stop_head).parameters["grace"].default)


def bare_cycle(num_cpus: int) -> tuple[float, float]:
    """One bare ``ray start --head`` start-to-ready and group teardown (SIGTERM, then SIGKILL after the
    provider's own grace, so both sides stop under the same rule), in seconds."""
    temp_dir = tempfile.mkdtemp(prefix="rayb-", dir="/tmp")
    dash = free_port()
    cmd = [
        ray_executable(), "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        f"--port={free_port()}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dash}", f"--temp-dir={temp_dir}", f"--num-cpus={num_cpus}",
        f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": temp_dir, "RAY_AUTH_MODE": "disabled"}
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        while not _answers(f"http://127.0.0.1:{dash}"):
            if proc.poll() is not None or time.monotonic() - started > 120:
                raise RuntimeError("bare ray start --head did not come up")
            time.sleep(0.25)
        ready = time.monotonic() - started
        grace = provider_grace_s()
        stopping = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        while not _group_gone(proc.pid):
            proc.poll()
            if time.monotonic() - stopping > grace:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.05)
        return ready, time.monotonic() - stopping
    finally:
        if not _group_gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)


def provider_cycle(num_cpus: int, index: int) -> tuple[float, float]:
    """One provider local-backend start (token auth on, as users get it) and teardown, in seconds."""
    started = time.monotonic()
    name = f"bench-cluster-{os.getpid()}-{index}"
    info, created = start_cluster(LocalPlan(name, options=LocalClusterOptions(num_cpus=num_cpus)))
    ready = time.monotonic() - started
    stopping = time.monotonic()
    try:
        assert created
    finally:
        stop_cluster(info)
    return ready, time.monotonic() - stopping


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 (figures are reported, not asserted)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--iterations", type=int, default=3, help="start/stop cycles per variant (default 3)")
    parser.add_argument("--num-cpus", type=int, default=1, help="logical CPUs of each head (default 1)")
    args = parser.parse_args(argv)
    samples: dict[str, list[tuple[float, float]]] = {"bare": [], "provider": []}
    load_before = _load()
    for index in range(args.iterations):  # interleaved, so machine load drifts hit both alike
        samples["bare"].append(bare_cycle(args.num_cpus))
        samples["provider"].append(provider_cycle(args.num_cpus, index))
        print(
            f"iteration {index + 1}: bare {samples['bare'][-1]}, provider {samples['provider'][-1]}",
            flush=True,
        )
    result = _summarise(samples, args, load_before)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["medians_s"], indent=2))
    for key, ratio in result["ratios"].items():
        print(
            f"{key}: provider/bare = {ratio:.2f} (goal <= {GOAL}) {'OK' if ratio <= GOAL else 'ABOVE GOAL'}"
        )
    print(f"load average (1 min) before/after: {load_before:.2f} / {_load():.2f}; written to {OUT}")
    return 0


def _summarise(
    samples: dict[str, list[tuple[float, float]]], args: Any, load_before: float
) -> dict[str, Any]:
    medians = {
        name: {
            "start_to_ready": statistics.median(s[0] for s in runs),
            "teardown": statistics.median(s[1] for s in runs),
        }
        for name, runs in samples.items()
    }
    return {
        "iterations": args.iterations,
        "num_cpus": args.num_cpus,
        "samples_s": samples,
        "medians_s": medians,
        "ratios": {
            key: medians["provider"][key] / medians["bare"][key] for key in ("start_to_ready", "teardown")
        },
        "goal_ratio": GOAL,
        "load_average_1m": {"before": load_before, "after": _load()},
        "cpu_count": os.cpu_count(),
    }


if __name__ == "__main__":
    raise SystemExit(main())

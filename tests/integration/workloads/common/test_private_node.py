"""A standalone workload's private Ray starts no dashboard, autoscaler or log monitor, and still works.

The run happens in a child interpreter (the test process may have Ray initialised already): it starts
the private Ray as a workload does (:func:`ray_session` with no address, no ``RAY_ADDRESS``), lists
the processes running in its private folder, runs tasks and an actor, and checks that a task's error
still reaches the driver. If a Ray upgrade changes the head-node class this relies on, the lean start
falls back to Ray's full one and the process check fails here, not silently in a benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

CHILD = r"""
import json, os, sys
from pathlib import Path
import ray
from airflow_ray_provider.workloads.common.ray_session import ray_session

def processes_in(folder):
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if folder in cmdline:
                found.append(cmdline)
    return found

@ray.remote
def square(x):
    return x * x

@ray.remote
def fail():
    raise ValueError("boom from a task")

@ray.remote
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return self.n

with ray_session() as session:
    folder = ray._private.worker._global_node.get_temp_dir_path()
    running = processes_in(folder)
    squares = ray.get([square.remote(i) for i in range(50)])
    counter = Counter.remote()
    total = [ray.get(counter.add.remote(k)) for k in (1, 2, 3)][-1]
    try:
        ray.get(fail.remote())
        error = ""
    except ray.exceptions.RayTaskError as exc:
        error = str(exc)
print(json.dumps({"mode": session.mode.value, "folder": folder, "running": running, "squares": sum(squares),
                  "total": total, "error": error, "left": processes_in(folder)}))
"""


def test_the_private_ray_runs_only_what_a_private_session_uses() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mode"] == "local"
    running = " | ".join(result["running"])
    for absent in ("dashboard/dashboard.py", "autoscaler/_private/monitor.py", "_private/log_monitor.py"):
        assert absent not in running, f"{absent} runs in the private Ray: {running}"
    for present in ("gcs_server", "raylet"):
        assert present in running, f"no {present} in the private Ray: {running}"
    assert result["squares"] == sum(i * i for i in range(50))
    assert result["total"] == 6
    assert "boom from a task" in result["error"]
    assert result["left"] == [], "processes outlived the session"
    assert not os.path.exists(result["folder"]), "the private Ray's folder was left"

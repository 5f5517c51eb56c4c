"""A standalone workload's private Ray: started with Ray's public options only, works, leaves nothing.

The run happens in a child interpreter (the test process may have Ray initialised already) with a
``TMPDIR`` of its own: it starts the private Ray as a workload does (:func:`ray_session` with no
address, no ``RAY_ADDRESS``), lists the processes running in its private folder, runs tasks and an
actor, and checks that a task's error still reaches the driver. ``include_dashboard=False`` reaches
Ray (its dashboard process serves no web UI), and every process and the folder are gone afterwards;
nothing is written into the user's home (a new local Ray writes the token it makes to
``~/.ray/auth_token`` unless it is given one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

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
    (folder,) = [str(p) for p in Path(os.environ["TMPDIR"]).glob("rayw*")]
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


def test_the_private_ray_starts_with_public_options_and_leaves_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["TMPDIR"] = tempfile.mkdtemp(prefix="arpp", dir="/tmp")  # short: Ray's sockets live below it
    env["HOME"] = os.path.join(env["TMPDIR"], "home")  # a user without a Ray token anywhere
    os.mkdir(env["HOME"])
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["mode"] == "local"
        running = result["running"]
        for present in ("gcs_server", "raylet"):
            assert any(present in line for line in running), f"no {present} in the private Ray: {running}"
        dashboard = [line for line in running if "dashboard/dashboard.py" in line]
        assert dashboard and all("--disable-frontend" in line for line in dashboard), dashboard
        assert result["squares"] == sum(i * i for i in range(50))
        assert result["total"] == 6
        assert "boom from a task" in result["error"]
        assert result["left"] == [], "processes outlived the session"
        assert not os.path.exists(result["folder"]), "the private Ray's folder was left"
        assert os.listdir(env["HOME"]) == [], "the private Ray wrote into the user's home"
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)

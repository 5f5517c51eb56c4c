"""A standalone run prints its own lines only, and leaves nothing in the temp dir.

Both workload commands run as a new user runs them (``python -m ...``, no ``RAY_AUTH_MODE``, no
``RAY_ADDRESS``), each in a private ``TMPDIR`` so what Ray leaves behind can be seen: Ray's default temp
dir there would be ``$TMPDIR/ray/session_*``. Before, every run printed Ray's token-auth notice, Ray
Data's execution plan and progress log, an error-level ``core_worker.cc`` line about actor constructor
arguments, and Ray Data's warning about an actor pool larger than its input.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.integration

#: Lines a user cannot act on, each seen in a standalone run before.
NOISE = (
    "Token authentication is enabled",
    "Starting execution of Dataset",
    "Running Dataset",
    "Progress will be logged",
    "core_worker.cc",
    "constructor arguments in the object store",
    "UserWarning",
    "(raylet)",
)


@pytest.fixture
def private_tmp() -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="arpq", dir="/tmp")  # short: Ray's sockets live below it
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(module: str, config: dict[str, Any], tmp: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONWARNINGS"}
    env.update(TMPDIR=tmp)
    return subprocess.run(
        [sys.executable, "-m", module, "--config-json", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def _assert_quiet(done: subprocess.CompletedProcess[str], tmp: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "starting a private local Ray" in out, "the run must have used a private Ray"
    noisy = [line for line in out.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, "\n".join(noisy)
    assert os.listdir(tmp) == [], f"left in TMPDIR: {os.listdir(tmp)}"  # no ray/session_*, no rayw*


def test_a_standalone_evaluation_on_ray_is_quiet(
    eval_config: Callable[..., dict[str, Any]], private_tmp: str, tmp_path: Any
) -> None:
    cfg = eval_config(
        output_uri=str(tmp_path / "eval"),
        engine="ray",
        scoring={"concurrency": 8, "num_cpus": 0.25, "read_num_cpus": 0.25},
    )
    _assert_quiet(_run("airflow_ray_provider.workloads.evaluate", cfg, private_tmp), private_tmp)
    with open(tmp_path / "eval" / "metrics.json") as fh:
        assert json.load(fh)["run"]["ray_session"] == "local"


def test_a_standalone_zone_training_is_quiet(
    zone_config: Callable[..., dict[str, Any]], private_tmp: str, tmp_path: Any
) -> None:
    cfg = zone_config(output_uri=str(tmp_path / "zones"), engine="ray")  # auto: worker processes here
    _assert_quiet(_run("airflow_ray_provider.workloads.zone_training", cfg, private_tmp), private_tmp)

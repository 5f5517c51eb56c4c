"""A standalone workload run never joins a Ray cluster it merely finds on the machine.

A *foreign* Ray head (another user's, another test's) runs in a private ``TMPDIR`` and is recorded in
Ray's ``ray_current_cluster`` file there, so a bare ``ray.init()`` in that environment attaches to it:
the control below proves it. The zone-training and evaluation commands, run standalone in the same
environment, must start their own private Ray instead: the foreign head sees no driver of theirs, their
artifacts say ``ray_session: local``, and their private Ray folders are gone afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.integration

CONTROL = """
import json
import ray
ray.init(logging_level="WARNING")
context = ray.get_runtime_context()
print(json.dumps({"gcs_address": context.gcs_address, "job_id": context.get_job_id()}))
ray.shutdown()
"""


@pytest.fixture(scope="module")
def foreign_head() -> Iterator[dict[str, Any]]:
    """A Ray head that a bare ``ray.init()`` finds through ``$TMPDIR/ray/ray_current_cluster``."""
    from airflow_ray_provider.local.head import LocalHeadConfig, start_head, stop_head

    root = tempfile.mkdtemp(prefix="arpfh", dir="/tmp")  # short: Ray's sockets live below it
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RAY_ADDRESS", "RAY_TMPDIR", "RAY_AUTH_TOKEN", "RAY_JOB_CONFIG_JSON_ENV_VAR")
    }
    env.update(TMPDIR=root, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    info = None
    try:
        info = start_head(LocalHeadConfig(num_cpus=1, auth=False, temp_root=root), name="foreign-head")
        # ``ray start`` writes ray_current_cluster into its temp dir once the node is up; make that dir
        # Ray's default one for this environment ($TMPDIR/ray), as if the head had been started with
        # the defaults.
        address_file = os.path.join(info.temp_dir, "ray_current_cluster")
        deadline = time.monotonic() + 120
        while not os.path.exists(address_file) and time.monotonic() < deadline:
            time.sleep(0.2)
        with open(address_file) as fh:
            assert _port(fh.read().strip()) == _port(info.gcs_address)
        os.symlink(info.temp_dir, os.path.join(root, "ray"))
        yield {"info": info, "env": env, "root": root}
    finally:
        if info is not None:
            stop_head(info)
        shutil.rmtree(root, ignore_errors=True)


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a Python command in its own process group, killed with all it started if it hangs."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _port(address: str) -> str:
    """The port of a GCS address (Ray may record the head by the machine's IP, not 127.0.0.1)."""
    return address.rsplit(":", 1)[1]


def _drivers(info: Any) -> set[str]:
    """Job ids of the drivers that ever connected to the head (from its state API)."""
    from ray.util.state import list_jobs

    return {job.job_id for job in list_jobs(address=info.dashboard_url, raise_on_missing_output=False)}


def test_standalone_runs_ignore_a_foreign_head_that_ray_init_would_join(
    foreign_head: dict[str, Any],
    zone_config: Callable[..., dict[str, Any]],
    eval_config: Callable[..., dict[str, Any]],
    tmp_path: Any,
) -> None:
    info, env, root = foreign_head["info"], foreign_head["env"], foreign_head["root"]
    control = _run(["-c", CONTROL], env, timeout=120)
    assert control.returncode == 0, control.stderr[-3000:]
    attached = json.loads(control.stdout.strip().splitlines()[-1])
    assert _port(attached["gcs_address"]) == _port(info.gcs_address), "a bare ray.init() must attach here"
    assert _drivers(info) == {attached["job_id"]}

    zones = zone_config(output_uri=str(tmp_path / "zones"))
    zone_run = _run(
        ["-m", "airflow_ray_provider.workloads.zone_training", "--config-json", json.dumps(zones)], env
    )
    assert zone_run.returncode == 0, zone_run.stderr[-3000:]
    assert _drivers(info) == {attached["job_id"]}, "zone training attached to the foreign head"
    assert "Ray session: standalone: starting a private local Ray" in zone_run.stderr
    with open(tmp_path / "zones" / "summary.json") as fh:
        summary = json.load(fh)
    assert summary["run"]["ray_session"] == "local" and summary["succeeded"] == 24

    evaluation = eval_config(output_uri=str(tmp_path / "eval"))
    eval_run = _run(
        ["-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(evaluation)], env
    )
    assert eval_run.returncode == 0, eval_run.stderr[-3000:] + eval_run.stdout[-3000:]
    assert _drivers(info) == {attached["job_id"]}, "the evaluation attached to the foreign head"
    assert "Ray session: standalone: starting a private local Ray" in eval_run.stdout
    with open(tmp_path / "eval" / "metrics.json") as fh:
        assert json.load(fh)["run"]["ray_session"] == "local"

    assert not [name for name in os.listdir(root) if name.startswith("rayw")], "private Ray folders left"

"""Where a workload's Ray comes from, with real Ray: standalone runs and a Ray job.

A standalone workload run never joins a Ray cluster it merely finds on the machine.

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

DRIVERS = """
import json, sys
from ray._raylet import GcsClient
print(json.dumps(sorted(job_id.hex() for job_id in GcsClient(address=sys.argv[1]).get_all_job_info())))
"""


@pytest.fixture(scope="module")
def foreign_head() -> Iterator[dict[str, Any]]:
    """``ray start --head`` with Ray's default temp dir for ``TMPDIR=<private folder>``.

    ``ray start`` records the head in ``$TMPDIR/ray/ray_current_cluster``: a bare ``ray.init()`` with
    that ``TMPDIR`` joins it, as one would join another user's head in the machine's ``/tmp/ray``.
    """
    from airflow_ray_provider.local import free_port

    root = tempfile.mkdtemp(prefix="arpfh", dir="/tmp")  # short: Ray's sockets live below it
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RAY_ADDRESS", "RAY_TMPDIR", "RAY_AUTH_TOKEN", "RAY_JOB_CONFIG_JSON_ENV_VAR")
    }
    env.update(TMPDIR=root, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    gcs_port = free_port()
    ports = (
        "ray-client-server-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "runtime-env-agent-port",
        "metrics-export-port",
    )
    command = [
        os.path.join(os.path.dirname(sys.executable), "ray"),
        "start", "--head", "--block", "--disable-usage-stats", "--include-dashboard=false", "--num-cpus=1",
        "--node-ip-address=127.0.0.1", f"--port={gcs_port}", f"--temp-dir={os.path.join(root, 'ray')}",
        *(f"--{name}={free_port()}" for name in ports),
    ]  # fmt: skip
    with open(os.path.join(root, "head.log"), "wb") as log:
        head = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        address_file = os.path.join(root, "ray", "ray_current_cluster")
        deadline = time.monotonic() + 240  # a loaded 2-core machine has taken 60 s
        while not os.path.exists(address_file) and head.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not os.path.exists(address_file):
            with open(os.path.join(root, "head.log")) as fh:
                pytest.fail(f"the foreign head did not start:\n{fh.read()[-3000:]}")
        yield {"gcs_address": f"127.0.0.1:{gcs_port}", "env": env, "root": root}
    finally:
        _stop_group(head)
        shutil.rmtree(root, ignore_errors=True)


def _stop_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the process group this test started, SIGKILL whatever is left after 5 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


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


def _drivers(head: dict[str, Any]) -> list[str]:
    """Job ids of every driver that ever connected to the head (its GCS job table)."""
    done = _run(["-c", DRIVERS, head["gcs_address"]], head["env"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_standalone_runs_ignore_a_foreign_head_that_ray_init_would_join(
    foreign_head: dict[str, Any],
    zone_config: Callable[..., dict[str, Any]],
    eval_config: Callable[..., dict[str, Any]],
    tmp_path: Any,
) -> None:
    env, root = foreign_head["env"], foreign_head["root"]
    control = _run(["-c", CONTROL], env, timeout=120)
    assert control.returncode == 0, control.stderr[-3000:]
    attached = json.loads(control.stdout.strip().splitlines()[-1])
    assert _port(attached["gcs_address"]) == _port(foreign_head["gcs_address"]), "ray.init() must join it"
    assert _drivers(foreign_head) == [attached["job_id"]]

    zones = zone_config(output_uri=str(tmp_path / "zones"), engine="ray")  # auto: worker processes here
    zone_run = _run(
        ["-m", "airflow_ray_provider.workloads.zone_training", "--config-json", json.dumps(zones)], env
    )
    assert zone_run.returncode == 0, zone_run.stderr[-3000:]
    assert _drivers(foreign_head) == [attached["job_id"]], "zone training attached to the foreign head"
    assert "Ray session: standalone: starting a private local Ray" in zone_run.stderr
    with open(tmp_path / "zones" / "summary.json") as fh:
        summary = json.load(fh)
    assert summary["run"]["ray_session"] == "local" and summary["succeeded"] == 24

    evaluation = eval_config(output_uri=str(tmp_path / "eval"), engine="ray")  # auto: in-process here
    eval_run = _run(
        ["-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(evaluation)], env
    )
    assert eval_run.returncode == 0, eval_run.stderr[-3000:] + eval_run.stdout[-3000:]
    assert _drivers(foreign_head) == [attached["job_id"]], "the evaluation attached to the foreign head"
    assert "Ray session: standalone: starting a private local Ray" in eval_run.stdout
    with open(tmp_path / "eval" / "metrics.json") as fh:
        assert json.load(fh)["run"]["ray_session"] == "local"

    assert not [name for name in os.listdir(root) if name.startswith("rayw")], "private Ray folders left"


def test_ray_address_auto_joins_the_head_ray_start_recorded(
    foreign_head: dict[str, Any], zone_config: Callable[..., dict[str, Any]], tmp_path: Any
) -> None:
    """``auto`` is the head in Ray's ``ray_current_cluster`` file (here: the fixture's ``ray start``)."""
    before = _drivers(foreign_head)
    zones = {**zone_config(output_uri=str(tmp_path / "zones"), engine="ray"), "ray_address": "auto"}
    done = _run(
        ["-m", "airflow_ray_provider.workloads.zone_training", "--config-json", json.dumps(zones)],
        foreign_head["env"],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "connecting to ray_address auto" in done.stderr
    assert len(_drivers(foreign_head)) == len(before) + 1, "the run's driver joined the recorded head"


def test_a_ray_job_runs_on_its_own_cluster(
    ray_head: Any, ray_head_token: str, zone_config: Callable[..., dict[str, Any]], tmp_path: Any
) -> None:
    """Submitted through the Job API, the command finds the job's cluster from the supervisor's env."""
    import shlex

    from ray.job_submission import JobStatus, JobSubmissionClient

    raw = zone_config(output_uri=str(tmp_path / "zones"))
    command = [
        sys.executable,
        "-m",
        "airflow_ray_provider.workloads.zone_training",
        "--config-json",
        json.dumps(raw),
    ]
    client = JobSubmissionClient(
        ray_head.dashboard_url, headers={"Authorization": f"Bearer {ray_head_token}"}
    )
    job_id = str(client.submit_job(entrypoint=shlex.join(command)))
    status = client.get_job_status(job_id)
    try:
        deadline = time.monotonic() + 300
        while not status.is_terminal() and time.monotonic() < deadline:
            time.sleep(1)
            status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        assert status == JobStatus.SUCCEEDED, logs[-3000:]
    finally:
        if not status.is_terminal():
            client.stop_job(job_id)
    assert "Ray session: inside a Ray job: connecting to the job's cluster at " in logs
    with open(tmp_path / "zones" / "summary.json") as fh:
        summary = json.load(fh)
    assert summary["run"]["ray_session"] == "job" and summary["succeeded"] == 24


def test_a_private_ray_that_does_not_start_in_time_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GCS that misses Ray's start wait (here: a wait of 0 s): the error, and nothing outlives it."""
    import ray

    from airflow_ray_provider.workloads.common.ray_session import ray_session

    root = tempfile.mkdtemp(prefix="arpg", dir="/tmp")  # short: Ray's sockets live below it
    monkeypatch.setenv("TMPDIR", root)
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "0")
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        with pytest.raises(RuntimeError, match="Timed out waiting for file"), ray_session():
            pass
        assert not ray.is_initialized()
        assert os.listdir(root) == [], "the private Ray's folder is removed"
        running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert root not in running, "no Ray process of the failed start is left"
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def test_private_rays_one_after_another_in_one_process_all_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ray.init`` sets ``RAY_AUTH_MODE`` in the process and keeps the first token it read: each later
    private Ray of the same process must still come up, and the setting must not outlive a session (a
    Job API client would then look for a token). Each session's folder is its own: no later session
    writes into an earlier one's (``ray.init`` writes its spilling folder into the system config it is
    given)."""
    import ray

    from airflow_ray_provider.workloads.common.ray_session import ray_session

    roots = [tempfile.mkdtemp(prefix=f"arpt{i}", dir="/tmp") for i in range(2)]
    for key in ("RAY_TMPDIR", "RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    try:
        for root in roots:
            monkeypatch.setenv("TMPDIR", root)
            with ray_session():
                assert ray.get(ray.put("answered")) == "answered"
            assert not ray.is_initialized()
            assert "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ
        assert {root: os.listdir(root) for root in roots} == {root: [] for root in roots}
    finally:
        ray.shutdown()
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)

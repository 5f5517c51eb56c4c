"""``airflow-ray`` end to end, as a user runs it: a real subprocess, real local Ray heads, the real Job API.

Success, a failing job (non-zero exit and the log's tail), Ctrl-C mid-run (job stopped, the cluster it
created gone, nothing left running), a rerun with the same ``--name`` (one Ray job), ``--ray-address``
and ``--conn`` against the session's head (started with ``ray start --head``, token auth), the ``jobs``
and ``clusters`` commands, and bad input (exit 2, one line naming the flag, no cluster started).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "airflow_ray_provider.cli"]


@pytest.fixture
def registry(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local-head registry of the test's own: what is listed in it is what the CLI left running."""
    from airflow_ray_provider.clusters.local import REGISTRY_ENV

    folder = tmp_path_factory.mktemp("reg")
    monkeypatch.setenv(REGISTRY_ENV, str(folder))
    return folder


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **extra}


def _cli(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=_env(**env))


def _heads() -> list[dict[str, Any]]:
    from airflow_ray_provider.clusters.local import list_clusters

    return list_clusters()


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its parent does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def test_local_run_streams_the_log_succeeds_and_leaves_nothing(registry: Path):
    out = _cli("run", "--local", "--name", _name(), "--", "python", "-c", "print('cli-success-marker')")
    assert out.returncode == 0, out.stderr
    assert "cli-success-marker" in out.stdout
    assert "SUCCEEDED" in out.stderr and "Deleted Ray cluster" in out.stderr
    assert _heads() == []


def test_a_failing_job_exits_non_zero_with_the_log_tail(registry: Path):
    code = "import sys; print('cli-failure-marker'); sys.exit(3)"
    out = _cli("run", "--local", "--", "python", "-c", code)
    assert out.returncode == 1
    assert "FAILED with driver exit code 3" in out.stderr and "cli-failure-marker" in out.stderr
    assert _heads() == []


def _interrupt_mid_run(
    args: list[str], env: dict[str, str], python: str = "python"
) -> tuple[subprocess.CompletedProcess[str], str]:
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            *args,
            "--",
            python,
            "-c",
            "import time; print('started', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
        # As from a terminal: Ctrl-C raises KeyboardInterrupt. A pytest-xdist worker ignores SIGINT, and
        # an ignored signal stays ignored across exec, so the CLI would never see the interrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 240
    while "started" not in seen:  # the job's own log line: it runs
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        seen = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), stderr


def test_ctrl_c_stops_the_job_and_deletes_the_cluster_it_created(registry: Path):
    name = _name()
    result, stderr = _interrupt_mid_run(["--local", "--name", name], {})
    assert result.returncode == 130, stderr
    assert "Stopped Ray job" in stderr and "(was running: True)" in stderr and "Deleted Ray cluster" in stderr
    assert _heads() == []
    started = [line for line in stderr.splitlines() if "Started Ray cluster" in line]
    assert started, stderr


def test_ctrl_c_on_a_cluster_by_address_stops_the_job_and_keeps_the_cluster(
    ray_head, ray_head_token, ray_job_hook
):
    name = _name()
    env = {"RAY_AUTH_TOKEN": ray_head_token}
    result, stderr = _interrupt_mid_run(["--ray-address", ray_head.dashboard_url, "--name", name], env)
    assert result.returncode == 130, stderr
    sid = base_submission_id("cli", name, "run")
    eventually(lambda: ray_job_hook.get_job(sid).status is JobStatus.STOPPED, timeout=60)
    assert ray_job_hook.get_logs(sid)  # the cluster is someone else's: still there, answering


def test_a_rerun_with_the_same_name_reattaches_and_submits_once(ray_head, ray_head_token, ray_job_hook):
    name = _name()
    args = [
        "run",
        "--ray-address",
        ray_head.dashboard_url,
        "--name",
        name,
        "--",
        "python",
        "-c",
        "print('once')",
    ]
    first = _cli(*args, RAY_AUTH_TOKEN=ray_head_token)
    second = _cli(*args, RAY_AUTH_TOKEN=ray_head_token)
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    assert "Submitted Ray job" in first.stderr and "Found finished Ray job" in second.stderr
    base = base_submission_id("cli", name, "run")
    assert [j.submission_id for j in ray_job_hook.list_jobs() if j.submission_id.startswith(base)] == [base]
    jobs = _cli("jobs", "list", "--ray-address", ray_head.dashboard_url, RAY_AUTH_TOKEN=ray_head_token)
    assert f"{base}\tSUCCEEDED" in jobs.stdout
    logs = _cli("jobs", "logs", base, "--ray-address", ray_head.dashboard_url, RAY_AUTH_TOKEN=ray_head_token)
    assert "once" in logs.stdout


def test_an_airflow_connection_is_a_target_too(ray_conn_id, ray_job_hook, tmp_path: Path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "main.py").write_text("print('shipped from my checkout')\n")
    out = _cli(
        "run", "--conn", ray_conn_id, "--working-dir", str(tmp_path / "code"), "--", "python", "main.py"
    )
    assert out.returncode == 0, out.stderr
    assert "shipped from my checkout" in out.stdout


def test_clusters_list_and_delete_a_kept_local_cluster(registry: Path):
    name = _name()
    out = _cli("run", "--local", "--name", name, "--cleanup", "never", "--", "python", "-c", "print(1)")
    assert out.returncode == 0 and "Kept Ray cluster" in out.stderr, out.stderr
    (head,) = _heads()
    cluster = head["info"]["name"]
    assert cluster in _cli("clusters", "list").stdout
    again = _cli("run", "--local", "--name", name, "--cleanup", "never", "--", "python", "-c", "print(1)")
    assert "Re-attached to Ray cluster" in again.stderr and "Found finished" in again.stderr
    # The kept head is a standing cluster by name now: a job runs on it, and no cleanup deletes it.
    code = "print('on-the-standing-head')"
    standing = _cli("run", "--local-cluster", cluster, "--cleanup", "always", "--", "python", "-c", code)
    assert standing.returncode == 0 and "on-the-standing-head" in standing.stdout, standing.stderr
    assert "Attached to standing Ray cluster" in standing.stderr and "Deleted" not in standing.stderr
    assert [h["info"]["name"] for h in _heads()] == [cluster]
    deleted = _cli("clusters", "delete", cluster)
    assert deleted.returncode == 0 and '"deleted": true' in deleted.stdout, deleted.stderr
    assert _heads() == []
    eventually(lambda: not _alive(head["info"]["pid"]), timeout=30, what="the head's process gone")


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--local", "--ray-address", "http://127.0.0.1:1"], "--ray-address"),
        (["--kuberay-context", "nope", "--namespace", "ray"], "--kuberay-context"),
        (["--kuberay-context", "a", "--namespace", "ray", "--spec", "/no/such/spec.yaml"], "--spec"),
        (["--kuberay-context", "a", "--namespace", "ray", "--spec", "BADSPEC"], "--spec"),
        (["--local", "--working-dir", "/no/such/folder"], "--working-dir"),
        (["--local", "--runtime-env", "LIST"], "--runtime-env"),
        (["--local", "--runtime-env", "/no/such/env.yaml"], "--runtime-env"),
        (["--ray-address", "127.0.0.1:8265"], "--ray-address"),
        (["--local"], "ENTRYPOINT"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag_before_any_cluster(
    args: list[str], flag: str, registry: Path, kubeconfig: str, tmp_path: Path
):
    listing = tmp_path / "env.yaml"
    listing.write_text("- pip\n- numpy\n")
    bad_spec = tmp_path / "spec.yaml"
    bad_spec.write_text("head: {cpus: 2}\n")  # no such field
    args = [str(listing) if a == "LIST" else str(bad_spec) if a == "BADSPEC" else a for a in args]
    entrypoint = [] if flag == "ENTRYPOINT" else ["--", "python", "-c", "print(1)"]
    out = _cli("run", *args, *entrypoint, KUBECONFIG=kubeconfig, timeout=120)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("airflow-ray: error: ") and flag in lines[0], lines
    assert _heads() == [] and out.stdout == ""


def test_kuberay_context_creates_a_raycluster_runs_the_job_and_deletes_it(
    kube_emulator, kuberay_controller, kuberay_client, tmp_path: Path
):
    """Against the Kubernetes emulator and the test KubeRay controller (which backs RayClusters with real
    Ray heads), through a kubeconfig file as a laptop has one."""
    import json

    from tests.fixtures.kuberay_emulator import TEST_NAMESPACE

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(kube_emulator.kubeconfig()))
    spec = tmp_path / "spec.yaml"
    spec.write_text("worker_groups: []\n")
    out = _cli(
        "run",
        "--kuberay-context",
        "emulator",
        "--namespace",
        TEST_NAMESPACE,
        "--spec",
        str(spec),
        "--dashboard-url-template",
        "http://{service_ip}:{dashboard_port}",
        "--name",
        _name(),
        "--",
        "python",
        "-c",
        "print('kuberay-cli-marker')",
        KUBECONFIG=str(kubeconfig),
    )
    assert out.returncode == 0, out.stderr
    assert "kuberay-cli-marker" in out.stdout
    created = [line.split()[-1] for line in out.stderr.splitlines() if "Started Ray cluster" in line]
    assert created and "Deleted Ray cluster" in out.stderr, out.stderr
    assert kuberay_client.find(created[0], namespace=TEST_NAMESPACE) is None


def test_a_rayjob_by_kube_context_fails_with_the_log_tail_is_kept_and_ctrl_c_deletes_it(
    kube_emulator, rayjob_controller, rayjobs, ray_job_hook, tmp_path: Path
):
    """``--rayjob``: KubeRay's RayJob (the test RayJob controller) on the session's shared head."""
    import json

    from tests.fixtures.kuberay import HEAD_MODE, TEST_NAMESPACE

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(kube_emulator.kubeconfig()))
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"annotations": {HEAD_MODE: "shared"}}))
    template = "http://{service_ip}:{dashboard_port}"
    kube = [
        "--kuberay-context",
        "emulator",
        "--namespace",
        TEST_NAMESPACE,
        "--dashboard-url-template",
        template,
    ]
    args = [*kube, "--rayjob", "--spec", str(spec), "--poll-interval", "0.2"]

    def rayjob_of(name: str) -> list[str]:
        sid = base_submission_id("cli", name, "run")
        return [o["metadata"]["name"] for o in rayjobs.list_labelled() if o["spec"].get("jobId") == sid]

    failing, code = _name(), "import sys; print('rayjob-cli-failure-marker'); sys.exit(3)"
    out = _cli("run", *args, "--name", failing, "--", sys.executable, "-c", code, KUBECONFIG=str(kubeconfig))
    assert out.returncode == 1, out.stderr
    assert "AppFailed" in out.stderr and "rayjob-cli-failure-marker" in out.stderr  # reason and log tail
    # a RayJob that finished is its run's record (KubeRay deletes its cluster): kept, with its verdict
    assert "Kept RayJob" in out.stderr and len(rayjob_of(failing)) == 1

    stopped = _name()
    result, stderr = _interrupt_mid_run(
        [*args, "--name", stopped], {"KUBECONFIG": str(kubeconfig)}, python=sys.executable
    )
    assert result.returncode == 130, stderr
    assert "Deleted RayJob" in stderr and rayjob_of(stopped) == []
    sid = base_submission_id("cli", stopped, "run")
    eventually(lambda: ray_job_hook.get_job(sid).status is JobStatus.STOPPED, timeout=60, what="job stopped")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_while_the_head_starts_leaves_nothing_running(sig: signal.Signals, registry: Path):
    """Ctrl-C or SIGTERM while the run's own head is still starting: exit 130, the head stopped and gone."""
    proc = subprocess.Popen(
        [*CLI, "run", "--local", "--name", _name(), "--", "python", "-c", "print(1)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )  # fmt: skip
    starting = eventually(
        lambda: [h for h in _heads() if h.get("state") == "starting"], timeout=120, what="a head starting"
    )
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Deleted Ray cluster" in stderr and _heads() == [], stderr
    eventually(lambda: not _alive(starting[0]["info"]["pid"]), timeout=30, what="the head's process gone")


def test_every_subcommand_says_a_bad_input_or_a_dead_address_in_one_line(registry: Path):
    """``jobs`` and ``clusters`` as ``run`` does: one line, exit 2 for bad input, 1 otherwise."""
    from airflow_ray_provider.local import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["jobs", "list", "--ray-address", dead], 1, dead),
        (["jobs", "logs", "some-job", "--ray-address", dead], 1, dead),
        (["jobs", "stop", "some-job", "--ray-address", dead], 1, dead),
        (["jobs", "list", "--ray-address", "127.0.0.1:8265"], 2, "--ray-address"),
        (["jobs", "logs", "some-job", "--local-cluster", "no-such-head"], 2, "no-such-head"),
        (["clusters", "delete", "no-such-head"], 2, "no-such-head"),
    ]
    for args, code, named in cases:
        out = _cli(*args, timeout=120)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == code, (args, out.stderr)
        assert len(lines) == 1 and lines[0].startswith("airflow-ray:") and named in lines[0], (args, lines)

"""The RayJob and standing-cluster targets, from ``airflow-ray run``'s flags: the target each names, and bad
input (exit 2, one line naming the flag) before any API call.

The kubeconfig's one context, ``a``, points at a port where nothing listens: a check that reached for
the Kubernetes API would fail with a connection error (exit 1), not exit 2.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch import KubeRayCluster, KubeRayJob, StandingCluster

pytestmark = pytest.mark.unit


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig with context ``a``. The ``kubernetes`` package reads ``$KUBECONFIG`` when imported."""
    from kubernetes.config import kube_config

    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
    )
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    return path


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    """``airflow-ray run`` treats SIGTERM as Ctrl-C; called in this process, it must not keep that."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _target(*flags: str):
    from airflow_ray_provider.cli import build_parser, run_target

    return run_target(build_parser().parse_args(["run", *flags, "--", "python", "x.py"]))


KUBE = ["--kuberay-context", "a", "--namespace", "ray"]


def test_the_flags_name_the_rayjob_and_standing_targets(kubeconfig: Path, tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("worker_groups: []\n")

    rayjob = _target(
        *KUBE,
        "--rayjob",
        "--spec",
        str(spec),
        "--submission-mode",
        "HTTPMode",
        "--ttl-seconds-after-finished",
        "0",
    )
    standing = _target(*KUBE, "--cluster", "team-ray", "--dashboard-url-template", "http://{name}:8265")

    assert rayjob == KubeRayJob("a", "ray", {"worker_groups": []}, "HTTPMode", ttl_seconds_after_finished=0)
    assert standing == StandingCluster("team-ray", "ray", "a", "http://{name}:8265")
    assert _target("--local-cluster", "ray-cli-x") == StandingCluster("ray-cli-x")
    assert isinstance(_target(*KUBE), KubeRayCluster)  # without --rayjob or --cluster: as before


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--local", "--local-cluster", "x"], "--local-cluster"),
        (["--local-cluster", "x", "--ray-address", "http://127.0.0.1:1"], "--ray-address"),
        (["--rayjob"], "--rayjob"),
        (["--local-cluster", "x", "--cluster", "y"], "--cluster"),
        ([*KUBE, "--submission-mode", "HTTPMode"], "--submission-mode"),
        ([*KUBE, "--rayjob", "--submission-mode", "NoSuchMode"], "--submission-mode"),
        ([*KUBE, "--rayjob", "--ttl-seconds-after-finished", "-1"], "--ttl-seconds-after-finished"),
        ([*KUBE, "--cluster", "y", "--rayjob"], "--cluster"),
        ([*KUBE, "--cluster", "y", "--spec", "SPEC"], "--cluster"),
        (["--kuberay-context", "nope", "--namespace", "ray", "--rayjob"], "--kuberay-context"),
        (["--kuberay-context", "nope", "--namespace", "ray", "--cluster", "y"], "--kuberay-context"),
        ([*KUBE, "--rayjob", "--spec", "/no/such/spec.yaml"], "--spec"),
        ([*KUBE, "--rayjob", "--spec", "LIST"], "--spec"),
        ([*KUBE, "--rayjob", "--spec", "BADFIELD"], "--spec"),
        ([*KUBE, "--spec", "BADFIELD"], "--spec"),
        ([*KUBE, "--rayjob", "--working-dir", "DIR"], "--working-dir"),
        ([*KUBE, "--rayjob", "--runtime-env", "LOCAL_ENV"], "--runtime-env"),
        (["--local-cluster", "no-such-head"], "--local-cluster"),
        (["--idle-ttl", "5"], "--idle-ttl"),
        (["--replace-pool"], "--replace-pool"),
        (["--pool", "Bad_Name"], "--pool"),
        (["--pool", "p", "--idle-ttl", "-1"], "--idle-ttl"),
        (["--pool", "p", "--local-cluster", "x"], "--pool"),
        (["--pool", "p", "--ray-address", "http://127.0.0.1:1"], "--pool"),
        ([*KUBE, "--pool", "p", "--rayjob"], "--pool"),
        (["--entrypoint-num-cpus", "-1"], "--entrypoint-num-cpus"),
        (["--pool", "p", "--entrypoint-num-gpus", "-0.5"], "--entrypoint-num-gpus"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(
    args: list[str], flag: str, kubeconfig: Path, tmp_path: Path, monkeypatch, capsys, sigterm_restored
):
    from airflow_ray_provider.cli import main
    from airflow_ray_provider.clusters.local import REGISTRY_ENV

    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "registry"))  # no local head is registered
    files = {
        "SPEC": "worker_groups: []\n",
        "LIST": "- a\n- b\n",
        "BADFIELD": "head: {cpus: 2}\n",
        "LOCAL_ENV": f"working_dir: {tmp_path}\n",
    }
    for key, text in files.items():
        (tmp_path / key).write_text(text)
    swap = {**{key: str(tmp_path / key) for key in files}, "DIR": str(tmp_path)}
    with pytest.raises(SystemExit) as exited:
        main(["run", *[swap.get(a, a) for a in args], "--", "python", "x.py"])

    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("airflow-ray: error: ") and flag in lines[0], lines
    assert not (tmp_path / "registry").exists() or not any((tmp_path / "registry").iterdir())


def test_the_targets_check_their_own_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ray_provider.launch import runner

    def resolve(target: Any, *_: Any) -> Any:  # no cluster: say what deadline the run's target got
        raise LookupError(target.active_deadline_seconds)

    monkeypatch.setattr(runner, "resolve", resolve)

    with pytest.raises(RayInvalidInputError, match="submission_mode"):
        KubeRayJob(None, "ray", submission_mode="Batch")
    with pytest.raises(RayInvalidInputError, match="active_deadline_seconds"):
        KubeRayJob(None, "ray", active_deadline_seconds=0)
    with pytest.raises(RayInvalidInputError, match="namespace"):
        StandingCluster("team-ray", context="a")
    with pytest.raises(RayInvalidInputError, match="name"):
        StandingCluster(" ")
    with pytest.raises(LookupError, match=r"^10$"):  # KubeRay enforces it
        runner.run("true", target=KubeRayJob(None, "ray"), timeout=9.2)
    with pytest.raises(RayInvalidInputError, match="not both"):
        runner.run("true", target=KubeRayJob(None, "ray", active_deadline_seconds=5), timeout=9)

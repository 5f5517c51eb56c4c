"""``launch.run`` on a KubeRay RayJob and on a standing cluster by name, and the CLI's bad input for them.

The official ``kubernetes`` client, through a kubeconfig file as a laptop has one, against the emulator
and the test KubeRay controllers (RayCluster and RayJob); every cluster is annotated
``test.kuberay/head: shared``, so the session's real Ray head answers behind it (a test costs seconds).
"""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from tests.fixtures.kuberay import CONTROLLER_AGENT, HEAD_MODE, TEST_NAMESPACE
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.integration

SHARED = {"annotations": {HEAD_MODE: "shared"}}
#: The head listens on 127.0.0.1; its status carries that as the service IP (see tests.fixtures.kuberay).
TEMPLATE = "http://{service_ip}:{dashboard_port}"
RAYJOBS = f"/apis/ray.io/v1/namespaces/{TEST_NAMESPACE}/rayjobs"


def _python(code: str) -> list[str]:
    """An entrypoint for the shared head (its PATH has no venv; a KubeRay image would say ``python``)."""
    return [sys.executable, "-c", code]


def _name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def _posts(kube: Any, since: int) -> list[str]:
    return [
        path for agent, method, path in kube.calls[since:] if method == "POST" and agent != CONTROLLER_AGENT
    ]


def _names(objects: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objects}


def _rayjob_of(rayjobs: Any, name: str) -> dict[str, Any] | None:
    sid = base_submission_id("cli", name, "run")
    found = [o for o in rayjobs.list_labelled() if o["spec"].get("jobId") == sid]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_a_rayjob_run_streams_its_log_a_rerun_reattaches_and_the_finished_rayjob_is_kept(
    kube_emulator, kube_context, rayjob_controller, rayjobs, ray_job_hook
):
    from airflow_ray_provider.launch import KubeRayJob, run

    name, lines, said = _name(), [], []
    target = KubeRayJob(
        kube_context, TEST_NAMESPACE, SHARED, ttl_seconds_after_finished=0, dashboard_url_template=TEMPLATE
    )
    since = len(kube_emulator.calls)
    first = run(
        _python("print('rayjob-launch-marker', 6 * 7)"),
        target=target,
        name=name,
        cleanup="never",
        poll_interval=0.2,
        emit=lines.extend,
        say=said.append,
    )

    sid = base_submission_id("cli", name, "run")
    assert (first.state.submission_id, first.state.status, first.reattached) == (
        sid,
        JobStatus.SUCCEEDED,
        False,
    )
    assert "rayjob-launch-marker 42" in lines  # the job's log, streamed through its cluster's dashboard
    kept = _rayjob_of(rayjobs, name)
    assert kept is not None and any("Kept RayJob" in s for s in said), said
    assert rayjob_controller.transitions[kept["metadata"]["name"]][-1] == "Complete"

    # The same name again: the same RayJob (no second one, no second Ray job). A finished RayJob is the
    # record of its run under every cleanup word (KubeRay deleted its cluster after the job, TTL 0).
    again = run(
        _python("print('never run')"),
        target=target,
        name=name,
        poll_interval=0.2,
        emit=lines.extend,
        say=said.append,
    )

    assert again.reattached and again.state.status is JobStatus.SUCCEEDED
    assert _posts(kube_emulator, since) == [RAYJOBS]
    assert [j.submission_id for j in ray_job_hook.list_jobs() if j.submission_id.startswith(sid)] == [sid]
    assert "never run" not in lines
    assert _rayjob_of(rayjobs, name) is not None and not any("Deleted RayJob" in s for s in said), said


@pytest.fixture
def standing_cluster(kuberay_controller: Any, kuberay_client: Any) -> Iterator[str]:
    """A RayCluster someone else made (no provider labels, token auth), ready behind the shared head."""
    from airflow_ray_provider.kuberay import RayClusterSpec, build_body

    name = f"team-{_name()}"
    kuberay_client.create(build_body(RayClusterSpec(**SHARED), name=name, namespace=TEST_NAMESPACE))
    try:
        eventually(
            lambda: ((kuberay_client.find(name) or {}).get("status") or {}).get("state") == "ready",
            what="standing cluster ready",
        )
        yield name
    finally:
        kuberay_client.delete(name)


def test_a_standing_kuberay_cluster_by_name_runs_the_job_and_is_never_deleted_even_on_ctrl_c(
    kube_context, standing_cluster, kuberay_client, kuberay_controller, ray_head, ray_job_hook
):
    from airflow_ray_provider.launch import StandingCluster, run

    name, lines, said = _name(), [], []
    target = StandingCluster(standing_cluster, TEST_NAMESPACE, kube_context, TEMPLATE)
    for _ in range(2):  # the second run finds the first's job: one Ray job
        result = run(
            _python("print('standing-marker')"),
            target=target,
            name=name,
            cleanup="always",
            poll_interval=0.2,
            emit=lines.extend,
            say=said.append,
        )
        assert result.state.status is JobStatus.SUCCEEDED and result.dashboard_url == ray_head.dashboard_url

    assert lines.count("standing-marker") == 1 and result.reattached
    assert any(f"Attached to standing Ray cluster {standing_cluster}" in s for s in said), said
    assert not any("Deleted" in s for s in said), said  # cleanup=always: still not ours to delete
    sid = base_submission_id("cli", name, "run")
    assert [j.submission_id for j in ray_job_hook.list_jobs() if j.submission_id.startswith(sid)] == [sid]

    # Ctrl-C (a KeyboardInterrupt while the log streams) stops the job and leaves the cluster alone.
    def interrupt_once_started(new: list[str]) -> None:
        if "started" in new:
            raise KeyboardInterrupt

    killed = _name()
    with pytest.raises(KeyboardInterrupt):
        run(
            _python("import time; print('started', flush=True); time.sleep(120)"),
            target=target,
            name=killed,
            poll_interval=0.2,
            emit=interrupt_once_started,
            say=said.append,
        )
    killed_sid = base_submission_id("cli", killed, "run")
    assert any(f"Stopped Ray job {killed_sid}" in s for s in said), said
    eventually(lambda: ray_job_hook.get_job(killed_sid).status is JobStatus.STOPPED, what="job stopped")
    assert kuberay_client.find(standing_cluster) is not None
    assert kuberay_controller.head_of(TEST_NAMESPACE, standing_cluster) is ray_head


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    """``airflow-ray run`` treats SIGTERM as Ctrl-C; called in this process, it must not keep that."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--cluster", "no-such-cluster"], "--cluster"),
        (["--rayjob", "--spec", "LIST"], "--spec"),
        (["--rayjob", "--working-dir", "DIR"], "--working-dir"),
        (["--rayjob", "--spec", "NEEDS_WORKERS"], "--spec"),
    ],
)
def test_bad_kuberay_input_exits_2_naming_the_flag_and_creates_nothing(
    args, flag, kube_emulator, kube_context, kuberay_client, rayjobs, tmp_path, capsys, sigterm_restored
):
    from airflow_ray_provider.cli import main

    (tmp_path / "listing.yaml").write_text("- pip\n- numpy\n")
    (tmp_path / "bad.yaml").write_text("worker_groups: [{name: w, min_replicas: 3, max_replicas: 1}]\n")
    swap = {
        "LIST": str(tmp_path / "listing.yaml"),
        "DIR": str(tmp_path),
        "NEEDS_WORKERS": str(tmp_path / "bad.yaml"),
    }
    args = [swap.get(a, a) for a in args]
    before = _names(kuberay_client.list_labelled()), _names(rayjobs.list_labelled())
    since = len(kube_emulator.calls)
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "run",
                "--kuberay-context",
                kube_context,
                "--namespace",
                TEST_NAMESPACE,
                *args,
                "--",
                "python",
                "x.py",
            ]
        )

    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"airflow-ray: error: {flag}: "), lines
    assert _posts(kube_emulator, since) == []  # no RayJob, no RayCluster, no Secret
    clusters, jobs = before  # an earlier test's cluster may still be going away: nothing new is the rule
    assert _names(kuberay_client.list_labelled()) <= clusters and _names(rayjobs.list_labelled()) <= jobs


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError], ids=["ctrl-c", "an-exception"])
def test_an_interrupt_while_the_raycluster_starts_deletes_it(
    interrupt: type[BaseException], kube_emulator: Any, kube_context: str, kuberay_controller: Any,
    kuberay_client: Any,
) -> None:  # fmt: skip
    """The run owns its RayCluster from the moment it is created: an interrupt before it is ready (here,
    right after the create call, as the run says so) deletes it, and its token Secret with it."""
    from airflow_ray_provider.launch import KubeRayCluster, run

    created: list[str] = []

    def say(message: str) -> None:
        if message.startswith("Started Ray cluster"):
            created.append(message.split()[3])
            raise interrupt("interrupted while the cluster starts")

    target = KubeRayCluster(kube_context, TEST_NAMESPACE, SHARED, TEMPLATE)
    with pytest.raises(interrupt):
        run(_python("print('never')"), target=target, name=_name(), poll_interval=0.2, say=say)
    assert created
    eventually(
        lambda: kuberay_client.find(created[0], namespace=TEST_NAMESPACE) is None,
        timeout=60, what="the interrupted RayCluster deleted",
    )  # fmt: skip

"""RayJob paths beyond the plain run: suspend on kill then resume, KubeRay's ``backoffLimit`` retry, the
``HTTPMode`` and ``SidecarMode`` submissions, ``deletionStrategy.deletionRules`` and
``preRunningDeadlineSeconds`` (KubeRay 1.6-1.7), through the emulator and the test KubeRay controllers.

As in ``test_kuberay_job.py``, every cluster uses the session's shared Ray head
(``test.kuberay/head: shared``), except the one that must never become ready.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_ray_provider.exceptions import KubeRayJobError, RayInvalidInputError
from tests.fixtures.kuberay import BEHAVIOUR, CONTROLLER_AGENT, HEAD_MODE, TEST_NAMESPACE
from tests.fixtures.ray_job import StandInTI, context_for
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.integration

SHARED = {"annotations": {HEAD_MODE: "shared"}}
RAYJOBS = f"/apis/ray.io/v1/namespaces/{TEST_NAMESPACE}/rayjobs"


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _once(marker: Path, first: str, then: str) -> list[str]:
    """An entrypoint that runs ``first`` on its first run (leaving ``marker``) and ``then`` afterwards."""
    code = (
        f"import os, sys, time; p = {str(marker)!r}; first = not os.path.exists(p); open(p, 'a').close(); "
        f"exec({first!r} if first else {then!r})"
    )
    return _python(code)


def _op(kuberay_conn: str, task_id: str, **kwargs: Any) -> Any:
    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator

    arguments = {"spec": SHARED, "poll_interval": 0.3, "ttl_seconds_after_finished": 0, **kwargs}
    return KubeRayJobOperator(task_id=task_id, cluster_conn_id=kuberay_conn, **arguments)


def _posts(kube: Any, since: int) -> list[str]:
    return [p for agent, m, p in kube.calls[since:] if agent != CONTROLLER_AGENT and m == "POST"]


def _run_in_thread(op: Any, ti: StandInTI) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = op.execute(context_for(ti))
        except BaseException as exc:  # surfaced by the test's assertions
            outcome["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _name(op: Any) -> str:
    """The RayJob of an operator's run (its target's plan)."""
    return str(op.run.target.plan.name)


def _deployment(rayjobs: Any, name: str) -> str:
    return ((rayjobs.find(name) or {}).get("status") or {}).get("jobDeploymentStatus") or ""


def test_killed_with_suspend_then_the_next_try_resumes_the_same_rayjob(
    kube_emulator, rayjob_controller, kuberay_conn, kuberay_client, rayjobs, tmp_path
):
    from airflow_ray_provider.launch.rayjob import ANNOTATION_SUSPENDED_ON_KILL

    since = len(kube_emulator.calls)
    entrypoint = _once(tmp_path / "ran", "time.sleep(300)", "print('resumed and finished')")
    first = _op(kuberay_conn, "suspended", entrypoint=entrypoint, suspend_on_kill=True)
    thread, _ = _run_in_thread(first, StandInTI(dag_id="rayjob_paths", task_id="suspended"))
    running = eventually(
        lambda: (
            first.run is not None
            and (rayjobs.find(_name(first)) or {}).get("status", {}).get("jobStatus") == "RUNNING"
        ),
        timeout=120.0,
        what="try 1's Ray job running",
    )
    assert running
    name = _name(first)
    cluster = rayjobs.get(name)["status"]["rayClusterName"]

    first.on_kill()  # what Airflow calls on the killed try

    # Suspending stops the Ray job, lets Ray's job monitor settle, then deletes the cluster (its head):
    # tens of seconds on a loaded machine, so the bound is the one try 1's start had.
    eventually(lambda: _deployment(rayjobs, name) == "Suspended", timeout=120.0, what="RayJob suspended")
    assert kuberay_client.find(cluster) is None  # KubeRay released the cluster
    assert rayjobs.get(name)["metadata"]["annotations"][ANNOTATION_SUSPENDED_ON_KILL] == "true"

    second = _op(kuberay_conn, "suspended", entrypoint=entrypoint, suspend_on_kill=True)
    result = second.execute(context_for(StandInTI(dag_id="rayjob_paths", task_id="suspended", try_number=2)))
    thread.join(30)

    assert (result["status"], result["rayjob_name"]) == ("SUCCEEDED", name)
    transitions = rayjob_controller.transitions[name]
    assert transitions.count("Initializing") == 2 and "Suspended" in transitions  # resumed, not re-created
    assert result["cluster_name"] != cluster  # on a new cluster
    assert rayjobs.get(name)["metadata"]["annotations"][ANNOTATION_SUSPENDED_ON_KILL] == "false"
    assert _posts(kube_emulator, since) == [RAYJOBS]  # one RayJob for both tries


def test_backoff_limit_retries_a_failed_job_on_a_new_cluster(
    rayjob_controller, kuberay_conn, rayjobs, tmp_path
):
    entrypoint = _once(tmp_path / "failed-once", "sys.exit(5)", "print('second attempt succeeded')")
    op = _op(kuberay_conn, "retried", entrypoint=entrypoint, backoff_limit=1)

    result = op.execute(context_for(StandInTI(dag_id="rayjob_paths", task_id="retried")))

    assert result["status"] == "SUCCEEDED"
    status = rayjobs.get(result["rayjob_name"])["status"]
    assert (status["failed"], status["succeeded"]) == (1, 1)
    transitions = rayjob_controller.transitions[result["rayjob_name"]]
    assert "Retrying" in transitions and transitions.count("Initializing") == 2


def test_backoff_limit_spent_fails_with_the_apps_reason(rayjob_controller, kuberay_conn, rayjobs):
    op = _op(kuberay_conn, "spent", entrypoint=_python("import sys; sys.exit(6)"), backoff_limit=1)

    with pytest.raises(KubeRayJobError) as excinfo:
        op.execute(context_for(StandInTI(dag_id="rayjob_paths", task_id="spent")))

    assert excinfo.value.reason == "AppFailed"
    assert rayjobs.get(excinfo.value.name)["status"]["failed"] == 2  # the try and its one retry


@pytest.mark.parametrize("mode", ["HTTPMode", "SidecarMode"])
def test_http_and_sidecar_modes_submit_without_a_submitter_job(
    kube_emulator, rayjob_controller, kuberay_conn, rayjobs, mode, capfd
):
    from kubernetes import client

    op = _op(kuberay_conn, f"mode-{mode.lower()}", entrypoint=_python(f"print('submitted in', {mode!r})"),
             submission_mode=mode)  # fmt: skip
    result = op.execute(context_for(StandInTI(dag_id="rayjob_paths", task_id=f"mode-{mode.lower()}")))

    assert result["status"] == "SUCCEEDED"
    assert f"submitted in {mode}" in "".join(capfd.readouterr())
    assert result["rayjob_name"] not in rayjob_controller.invalid
    api = kube_emulator.api_client()
    try:
        jobs = client.BatchV1Api(api).list_namespaced_job(TEST_NAMESPACE).items
    finally:
        api.close()
    assert result["rayjob_name"] not in {job.metadata.name for job in jobs}


def test_sidecar_mode_on_a_standing_cluster_fails_when_the_dag_is_parsed(kuberay_conn):
    with pytest.raises(RayInvalidInputError, match="SidecarMode"):
        _op(kuberay_conn, "sidecar", spec=None, cluster="team-ray", ttl_seconds_after_finished=None,
            entrypoint="python x.py", submission_mode="SidecarMode")  # fmt: skip


def test_deletion_rules_delete_workers_then_cluster_then_the_rayjob_each_after_its_ttl(
    rayjob_controller, kuberay_conn, kuberay_client, rayjobs
):
    rules = [
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}},
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 2}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 4}},
        {"policy": "DeleteCluster", "condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": 0}},
    ]
    op = _op(
        kuberay_conn, "rules", entrypoint=_python("print('rules')"), shutdown_after_job_finishes=False,
        ttl_seconds_after_finished=None, deletion_rules=rules,
    )  # fmt: skip

    result = op.execute(context_for(StandInTI(dag_id="rayjob_paths", task_id="rules")))

    assert result["status"] == "SUCCEEDED" and result["rayjob_name"] not in rayjob_controller.invalid
    name = result["rayjob_name"]
    eventually(lambda: rayjobs.find(name) is None, timeout=60.0, what="RayJob deleted by DeleteSelf")
    applied = rayjob_controller.deletions[name]
    assert [policy for policy, _ in applied] == ["DeleteWorkers", "DeleteCluster", "DeleteSelf"]
    assert [after >= ttl for (_, after), ttl in zip(applied, (0, 2, 4), strict=True)] == [True] * 3
    assert kuberay_client.find(result["cluster_name"]) is None


def test_deletion_rules_with_shutdown_are_refused_before_any_api_call(kuberay_conn):
    rule = {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}
    with pytest.raises(RayInvalidInputError, match="mutually exclusive"):
        _op(kuberay_conn, "both", entrypoint="python x.py", ttl_seconds_after_finished=None,
            deletion_rules=[rule])  # fmt: skip


def test_pre_running_deadline_fails_a_rayjob_whose_pods_never_schedule(
    rayjob_controller, kuberay_conn, rayjobs
):
    op = _op(
        kuberay_conn, "stuck", spec={"annotations": {BEHAVIOUR: "never-ready"}},
        entrypoint="python never_runs.py", pre_running_deadline_seconds=2,
    )  # fmt: skip
    started = time.monotonic()

    with pytest.raises(KubeRayJobError) as excinfo:
        op.execute(context_for(StandInTI(dag_id="rayjob_paths", task_id="stuck")))

    assert excinfo.value.reason == "PreRunningDeadlineExceeded"
    assert "preRunningDeadlineSeconds" in str(excinfo.value)
    # Without the deadline the operator would wait for a job that never runs: ended by the deadline, not
    # by the test's own timeout (a quiet machine takes ~10 s, load 20 took 42 s).
    assert time.monotonic() - started < 120
    assert "Running" not in rayjob_controller.transitions[excinfo.value.name]


def test_the_ray_job_link_uses_the_connections_address_for_people(
    rayjob_controller, kuberay_conn, rayjobs, monkeypatch
):
    """The Job API is called at the in-cluster address; the "Ray job" link is the browser's one."""
    import json
    import os

    from airflow_ray_provider.operators.base import JOB_URL_XCOM_KEY

    variable = f"AIRFLOW_CONN_{kuberay_conn.upper()}"
    conn = json.loads(os.environ[variable])
    conn["extra"]["link_url_template"] = "https://ray.example.com/{namespace}/{name}"
    monkeypatch.setenv(variable, json.dumps(conn))
    ti = StandInTI(dag_id="rayjob_paths", task_id="linked")

    result = _op(kuberay_conn, "linked", entrypoint=_python("print('linked')")).execute(context_for(ti))

    assert result["status"] == "SUCCEEDED"
    link = ti.xcoms[JOB_URL_XCOM_KEY]
    assert (
        link == f"https://ray.example.com/{TEST_NAMESPACE}/{result['cluster_name']}/#/jobs/{result['job_id']}"
    )
    assert result["dashboard_url"].startswith("http://")  # the in-cluster address it polled
    assert not result["dashboard_url"].startswith("https://ray.example.com")

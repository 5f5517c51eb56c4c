"""The local backend under ``dag.test()``: create -> (failing) work -> teardown, and no process left."""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil
import pytest

from tests.fixtures.dag_runs import task_states, xcom_value
from tests.fixtures.dag_runs import write_dag as write_dag_file

DAG_SOURCE = """
from datetime import datetime
from types import SimpleNamespace

from airflow.sdk import DAG, get_current_context, task

from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

OUT = {out!r}

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    create = CreateRayClusterOperator(task_id="create", local_options={{"num_cpus": 1}})

    @task
    def work(handle):
        import json, urllib.request
        from pathlib import Path

        token = Path(handle["auth_token_file"]).read_text().strip()
        request = urllib.request.Request(
            handle["dashboard_url"] + "/api/version", headers={{"Authorization": "Bearer " + token}}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            version = json.load(response)["ray_version"]
        # A retry of "create" in this run must find the same head, not start a second one.
        ctx = get_current_context()
        ti = SimpleNamespace(dag_id=ctx["ti"].dag_id, run_id=ctx["run_id"], task_id="create", map_index=-1)
        again = CreateRayClusterOperator(task_id="create", local_options={{"num_cpus": 1}}).execute(
            {{"ti": ti, "run_id": ctx["run_id"]}}
        )
        Path(OUT).write_text(json.dumps({{"version": version, "again": again, "token": token}}))
        raise RuntimeError("upstream failure on purpose")

    delete = DeleteRayClusterOperator(task_id="delete", cluster=create.output)
    create >> work(create.output) >> delete.as_teardown(setups=create)
"""


def _processes_using(temp_dir: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if temp_dir in " ".join(proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found


@pytest.mark.integration
def test_local_cluster_teardown_runs_after_upstream_failure(airflow_db, local_registry, tmp_path):
    out = tmp_path / "work.json"
    dag = write_dag_file(
        "cluster_local_teardown", DAG_SOURCE.format(out=str(out), dag_id="cluster_local_teardown")
    )

    dag_run = dag.test()

    states = task_states(dag_run)
    assert states == {"create": "success", "work": "failed", "delete": "success"}
    assert str(dag_run.state) == "failed"
    handle = xcom_value(dag_run, "create")
    seen = json.loads(out.read_text())
    assert seen["version"].startswith("2.")  # the head answered with its token while the run was going
    assert seen["again"]["extra"]["pid"] == handle["extra"]["pid"]  # the retry reused the head
    assert handle["backend"] == "local" and seen["token"] not in json.dumps(handle)  # refers, never contains
    assert oct(os.stat(local_registry).st_mode & 0o777) == "0o700"
    # Teardown left nothing: no process of that head, no temp dir, no registry record.
    assert _processes_using(handle["extra"]["temp_dir"]) == []
    assert not Path(handle["extra"]["temp_dir"]).exists()
    assert list(local_registry.glob("*.json")) == []
    assert xcom_value(dag_run, "delete") == {"name": handle["name"], "backend": "local", "deleted": True}


@pytest.mark.integration
def test_local_janitor_stops_only_expired_heads(local_registry, tmp_path):
    """Records of heads whose processes are gone (as after a killed worker): expired ones are cleaned up."""
    from airflow_ray_provider.kuberay import CREATED_BY, LABEL_CREATED_BY
    from airflow_ray_provider.operators.ray_cluster import RayClusterJanitorOperator

    local_registry.mkdir(mode=0o700)
    now = datetime.now(timezone.utc)
    for name, expiry in (("old", now - timedelta(minutes=1)), ("fresh", now + timedelta(hours=1))):
        temp_dir = tmp_path / f"rayh-{name}"
        temp_dir.mkdir()
        dead = 2**22 - 7  # no such process: the head died with its worker
        info = {
            "name": name,
            "pid": dead,
            "pgid": dead,
            "temp_dir": str(temp_dir),
            "token_file": None,
            "dashboard_url": "http://127.0.0.1:1",
            "gcs_address": "127.0.0.1:2",
        }
        record = {"info": info, "labels": {LABEL_CREATED_BY: CREATED_BY}, "expires_at": expiry.isoformat()}
        (local_registry / f"{name}.json").write_text(json.dumps(record))

    listed = RayClusterJanitorOperator(task_id="janitor", list_only=True).execute({})
    assert listed == ["old"] and (local_registry / "old.json").exists()

    deleted = RayClusterJanitorOperator(task_id="janitor").execute({})

    assert deleted == ["old"]
    assert sorted(p.name for p in local_registry.glob("*.json")) == ["fresh.json"]
    assert not (tmp_path / "rayh-old").exists() and (tmp_path / "rayh-fresh").exists()


@pytest.mark.integration
def test_a_head_is_up_only_once_its_node_started(ray_head):
    """The dashboard answers before the node registers; a head counts as started only after both."""
    from airflow_ray_provider.local import HEAD_LOG_NAME, STARTED_MARKER

    assert STARTED_MARKER in Path(ray_head.temp_dir, HEAD_LOG_NAME).read_text()


#: What :func:`start_head` logs before it starts a head again.
RETRY_MESSAGE = "The local Ray head failed during startup"


@pytest.mark.integration
def test_a_head_is_up_only_once_its_job_agent_answers(ray_head):
    """The job agent (which runs submitted jobs) can answer long after the dashboard; a head counts as up
    only once it answers too, so the first submission is not refused with "No available agent"."""
    from airflow_ray_provider.local import agent_answers

    assert ray_head.agent_url is not None
    assert agent_answers(ray_head)


@pytest.mark.integration
def test_a_head_whose_job_agent_cannot_open_its_port_is_started_again(caplog, monkeypatch):
    """A port picked for the agent can be taken before the agent binds it (its HTTP server starts after
    its modules load); Ray's agent then stays alive without one and no job can ever be submitted. That
    start counts as failed: the head is started again on fresh ports, and the failed one leaves nothing."""
    import shutil
    import socket
    import tempfile

    import airflow_ray_provider.local as head_module

    root = Path(tempfile.mkdtemp(prefix="arp-", dir="/tmp"))  # short: Ray's socket paths are limited

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port = taken.getsockname()[1]
    picks = iter(range(1, 1000))
    real_free_port = head_module.free_port
    # the first start's third pick is the agent's port (gcs, dashboard, agent): hand it the taken one
    pick = lambda: taken_port if next(picks) == 3 else real_free_port()  # noqa: E731
    monkeypatch.setattr(head_module, "free_port", pick)
    config = head_module.LocalHeadConfig(num_cpus=1, temp_root=str(root))
    try:
        with caplog.at_level("WARNING"):
            info = head_module.start_head(config, name="agent-port")
        try:
            assert info.agent_url is not None and not info.agent_url.endswith(f":{taken_port}")
            assert head_module.agent_answers(info)
            retries = [r.message for r in caplog.records if r.message.startswith(RETRY_MESSAGE)]
            assert len(retries) == 1 and "could not start its HTTP server" in retries[0], retries
            assert [p.name for p in root.iterdir()] == [Path(info.temp_dir).name]  # the failed one: gone
        finally:
            head_module.stop_head(info)
        assert list(root.iterdir()) == []
    finally:
        taken.close()
        shutil.rmtree(root, ignore_errors=True)


def _processes_of_head(temp_dir: str) -> list[str]:
    """Live processes that run in or were started for a head's temp dir (its ``RAY_TMPDIR``)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            environ = proc.environ()
        except (psutil.Error, OSError):
            environ = {}
        command = " ".join(proc.info["cmdline"] or [])
        if temp_dir in command or environ.get("RAY_TMPDIR") == temp_dir:
            found.append(f"{proc.info['pid']} {command[:120]}")
    return found


@pytest.mark.integration
def test_a_head_stopped_while_its_first_job_starts_leaves_no_process_and_no_folder():
    """A Ray worker starting when the head is stopped lives in a process group of its own (Ray moves
    each worker into one); stopping only the head's group would leave it running for seconds, re-creating
    the session's folders in the removed temp dir. Stopped right after a submission, nothing is left."""
    import shutil
    import tempfile
    import time
    import urllib.request

    from airflow_ray_provider.local import LocalHeadConfig, read_token, start_head, stop_head

    root = Path(tempfile.mkdtemp(prefix="arp-", dir="/tmp"))  # short: Ray's socket paths are limited
    try:
        info = start_head(LocalHeadConfig(num_cpus=1, temp_root=str(root)), name="stopped-early")
        try:
            token = read_token(info.token_file)
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            body = json.dumps({"entrypoint": "sleep 30"}).encode()
            request = urllib.request.Request(f"{info.dashboard_url}/api/jobs/", body, headers, method="POST")
            with urllib.request.urlopen(request, timeout=60) as response:
                assert response.status == 200
        finally:
            stop_head(info)
        assert _processes_of_head(info.temp_dir) == []
        time.sleep(2)  # what a surviving worker would re-create, it re-creates within a second
        assert list(root.iterdir()) == []
        assert _processes_of_head(info.temp_dir) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.integration
def test_a_head_runs_its_dashboard_and_monitors_but_no_ray_client_server(ray_head):
    """``ray start --head`` starts a Ray Client server whenever Ray Client's packages are installed (on a
    port nobody was told); a local head is reached through its Job API and starts none. What a user of
    the head sees stays: the dashboard, the autoscaler monitor (``ray status``), the log monitor."""
    from airflow_ray_provider.local import _cmdline, _head_processes

    running = " | ".join(_cmdline(pid).replace("\0", " ") for pid in _head_processes(ray_head))
    assert "ray.util.client.server" not in running, running
    for expected in ("dashboard/dashboard.py", "autoscaler/_private/monitor.py", "_private/log_monitor.py"):
        assert expected in running, f"no {expected} in the head: {running}"


@pytest.mark.integration
def test_what_a_head_leaves_in_its_temp_files_goes_with_it(ray_head):
    """The dashboard's multiprocessing folder (``pymp-*``, which a killed dashboard cannot remove) is in
    the head's temp dir, so stopping the head removes it: none is left behind in the machine's ``/tmp``."""
    assert list(Path(ray_head.temp_dir).glob("pymp-*")), "the dashboard's forkserver folder is not the head's"


@pytest.mark.integration
def test_a_head_that_cannot_start_is_tried_again_and_leaves_nothing(tmp_path, caplog):
    from airflow_ray_provider.local import START_ATTEMPTS, LocalHeadConfig, LocalHeadError, start_head

    config = LocalHeadConfig(resources={"CPU": 1.0}, temp_root=str(tmp_path))  # `ray start` refuses CPU here

    with caplog.at_level("WARNING"), pytest.raises(LocalHeadError, match="exited with") as info:
        start_head(config, name="doomed")

    assert "num-cpus" in str(info.value)  # Ray's own reason, from the head's log
    retries = [r for r in caplog.records if r.message.startswith(RETRY_MESSAGE)]
    assert len(retries) == START_ATTEMPTS - 1
    assert list(tmp_path.iterdir()) == []  # every attempt's temp dir is gone


@pytest.mark.integration
@pytest.mark.parametrize(
    ("signum", "handler", "raised"),
    [
        (signal.SIGINT, signal.default_int_handler, KeyboardInterrupt),  # Ctrl-C
        (signal.SIGTERM, "terminated", RuntimeError),  # a task runner's SIGTERM handler raises
    ],
)
def test_a_start_interrupted_mid_wait_leaves_a_head_found_and_stopped_by_name(
    local_registry, signum, handler, raised
):
    """A signal whose handler raises while the head comes up: the head stays registered (``starting``),
    so ``stop_cluster(find_cluster(name))`` stops every process of it and removes its files and record."""
    import tempfile
    import threading
    import time

    from airflow_ray_provider.clusters.local import (
        LocalPlan,
        find_cluster,
        read_record,
        start_cluster,
        stop_cluster,
    )
    from airflow_ray_provider.local import LocalHeadConfig

    def terminated(signum: int, frame: object) -> None:
        raise RuntimeError("terminated")

    name, root = f"interrupted-{signum}", Path(tempfile.mkdtemp(prefix="arp-", dir="/tmp"))
    record = local_registry / f"{name}.json"

    def signal_mid_wait() -> None:
        while not record.exists():
            time.sleep(0.02)
        time.sleep(0.5)  # registered, and well inside the wait (a head takes seconds to come up)
        os.kill(os.getpid(), signum)

    previous = signal.signal(signum, terminated if handler == "terminated" else handler)
    try:
        threading.Thread(target=signal_mid_wait, daemon=True).start()
        with pytest.raises(raised):
            config = LocalHeadConfig(num_cpus=1, temp_root=str(root), ready_timeout=300)
            start_cluster(LocalPlan(name, config=config))
    finally:
        signal.signal(signum, previous)
    left = read_record(name)
    assert left is not None and left["state"] == "starting"
    temp_dir = left["info"]["temp_dir"]

    info = find_cluster(name)
    assert info is not None, "the interrupted head is not findable by name"
    stop_cluster(info)

    assert _processes_of_head(temp_dir) == []
    assert not Path(temp_dir).exists() and read_record(name) is None
    assert list(root.iterdir()) == []
    root.rmdir()


@pytest.mark.integration
def test_a_start_interrupted_before_ray_runs_in_the_head_leaves_nothing(local_registry, monkeypatch):
    """An interrupt right after the head is registered and before its launcher lets Ray start: the head
    is stopped there and then, and looking it up by name removes its record. The interrupt is injected
    into the registry write (a signal cannot be timed into that window)."""
    import tempfile

    from airflow_ray_provider.clusters import local as cluster_module
    from airflow_ray_provider.clusters.local import LocalPlan, find_cluster, read_record, start_cluster
    from airflow_ray_provider.local import LocalHeadConfig

    write_json = cluster_module.write_json
    seen: list[dict] = []

    def register_then_interrupt(path: Path, record: dict) -> None:
        write_json(path, record)
        seen.append(record)
        raise KeyboardInterrupt

    monkeypatch.setattr(cluster_module, "write_json", register_then_interrupt)
    root = Path(tempfile.mkdtemp(prefix="arp-", dir="/tmp"))
    with pytest.raises(KeyboardInterrupt):
        start_cluster(LocalPlan("never-ran", config=LocalHeadConfig(num_cpus=1, temp_root=str(root))))

    (record,) = seen
    assert record["state"] == "starting" and read_record("never-ran") is not None
    assert find_cluster("never-ran") is None  # its head is gone: the lookup removes the stale record
    assert read_record("never-ran") is None
    assert _processes_of_head(record["info"]["temp_dir"]) == [] and list(root.iterdir()) == []
    root.rmdir()


@pytest.mark.integration
def test_a_start_interrupted_before_its_head_is_registered_runs_no_ray_and_leaves_nothing(monkeypatch):
    """Between spawning the head and registering it, a head nobody could find by name would be an orphan:
    its launcher waits for the go-ahead, and when the starter is interrupted it removes its temp dir and
    exits without starting Ray. The interrupt is injected right after the spawn (where no signal can be
    timed)."""
    import gc
    import tempfile

    import airflow_ray_provider.local as head_module
    from airflow_ray_provider.local import LocalHeadConfig, start_head
    from tests.fixtures.waiting import eventually

    def interrupted(**fields: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(head_module, "LocalHeadInfo", interrupted)
    root = Path(tempfile.mkdtemp(prefix="arp-", dir="/tmp"))
    with pytest.raises(KeyboardInterrupt):
        start_head(LocalHeadConfig(num_cpus=1, temp_root=str(root)), name="unregistered")
    gc.collect()  # the interrupted start's pipe to its launcher closes with it

    eventually(lambda: not list(root.iterdir()), timeout=30, what="the launcher removing its temp dir")
    eventually(lambda: _processes_of_head(str(root)) == [], timeout=30, what="no process of the head")
    root.rmdir()


CREATE_SCRIPT = """
import sys
from types import SimpleNamespace

from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

ti = SimpleNamespace(dag_id="orphan_dag", run_id=sys.argv[1], task_id="create", map_index=-1)
options = {"num_cpus": 1, "ready_timeout": float(sys.argv[2])}
CreateRayClusterOperator(task_id="create", local_options=options).execute({"ti": ti, "run_id": sys.argv[1]})
"""


def _kill_create_task_mid_wait(registry: Path, run_id: str, ready_timeout: float) -> dict:
    """Run a create task in its own process and SIGKILL it as soon as its head is registered.

    The head needs 6-40 s to come up; the record must exist before that wait starts, so the task dies
    mid-wait. Returns the registry record the killed task left.
    """
    import signal
    import subprocess
    import sys
    import time

    task = subprocess.Popen([sys.executable, "-c", CREATE_SCRIPT, run_id, str(ready_timeout)])
    deadline = time.monotonic() + 120
    try:
        while not list(registry.glob("*.json")):
            assert task.poll() is None, "the create task ended before it registered its head"
            assert time.monotonic() < deadline, "the create task never registered its head"
            time.sleep(0.05)
    finally:
        task.send_signal(signal.SIGKILL)
        task.wait()
    (path,) = registry.glob("*.json")
    return json.loads(path.read_text())


@pytest.mark.integration
def test_a_create_task_killed_mid_wait_leaves_a_head_its_rerun_adopts(local_registry):
    from airflow_ray_provider.local import LocalHeadInfo, is_running
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

    run_id = "manual__orphan_rerun"
    record = _kill_create_task_mid_wait(local_registry, run_id, ready_timeout=120)
    orphan = LocalHeadInfo.from_dict(record["info"])
    assert record["state"] == "starting" and is_running(orphan)

    ti = type("TI", (), {"dag_id": "orphan_dag", "run_id": run_id, "task_id": "create", "map_index": -1})
    # a generous wait: under load a head can take minutes to come up
    create = CreateRayClusterOperator(task_id="create", local_options={"num_cpus": 1, "ready_timeout": 300})
    handle = create.execute({"ti": ti, "run_id": run_id})
    try:
        # Adopted: the same head. Only when `ray start` itself gave up during startup (a starved
        # machine) is a fresh head started, and then the orphan must be gone.
        if handle["extra"]["pid"] != orphan.pid:
            assert not is_running(orphan) and _processes_using(orphan.temp_dir) == []
        (path,) = local_registry.glob("*.json")  # exactly one head registered
        assert json.loads(path.read_text())["state"] == "ready"
    finally:
        deleted = DeleteRayClusterOperator(task_id="delete", cluster=handle).execute({})
    assert deleted["deleted"] is True
    assert _processes_using(orphan.temp_dir) == [] and list(local_registry.glob("*.json")) == []


@pytest.mark.integration
def test_the_janitor_stops_a_head_whose_create_task_died_mid_wait_once_the_wait_is_over(local_registry):
    """The orphan's record expires when the killed task's wait would have ended (here after 6 s), not
    after the cluster's lifetime: the janitor leaves it alone before then and stops it after."""
    import time

    from airflow_ray_provider.local import LocalHeadInfo, is_running
    from airflow_ray_provider.operators.ray_cluster import RayClusterJanitorOperator

    record = _kill_create_task_mid_wait(local_registry, "manual__orphan_janitor", ready_timeout=6)
    orphan = LocalHeadInfo.from_dict(record["info"])
    expires_at = datetime.fromisoformat(record["expires_at"])
    assert is_running(orphan)
    # It expires when the killed task's wait would have ended, not after the cluster's 24 h lifetime.
    assert expires_at <= datetime.now(timezone.utc) + timedelta(seconds=6)
    try:
        # Until then a rerun may still adopt it: the janitor leaves it alone.
        assert RayClusterJanitorOperator(task_id="janitor").execute({}) == []
        time.sleep(max(0.0, (expires_at - datetime.now(timezone.utc)).total_seconds()) + 0.5)

        assert RayClusterJanitorOperator(task_id="janitor").execute({}) == [orphan.name]
    finally:
        from airflow_ray_provider.clusters.local import stop_cluster

        stop_cluster(orphan)  # a no-op once the janitor did its job
    assert _processes_using(orphan.temp_dir) == [] and not Path(orphan.temp_dir).exists()
    assert list(local_registry.glob("*.json")) == []


@pytest.mark.unit
def test_expiry_defaults_to_the_dags_run_timeout():
    from airflow.sdk import DAG

    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    with DAG("expiry_dag", schedule=None, dagrun_timeout=timedelta(hours=2)):
        bounded = CreateRayClusterOperator(task_id="c")
        explicit = CreateRayClusterOperator(task_id="e", expiry=600)
    assert bounded._request().expiry == timedelta(hours=2)
    assert explicit._request().expiry == timedelta(minutes=10)
    assert CreateRayClusterOperator(task_id="free")._request().expiry == timedelta(hours=24)

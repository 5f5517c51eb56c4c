"""Pools on real local heads: runs share one cluster under leases, a killed holder's lease expires, the
cluster goes ``idle_ttl`` after the last release (never while a lease lives), a lease in the idle window
keeps it, and a run of another spec fails before it submits anything.

Leases and idle TTLs are a few seconds; the jobs are one-line Python scripts (a 2-core machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ray_provider.clusters import LocalBackend
from airflow_ray_provider.clusters.local import list_clusters, stop_cluster
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.submission import base_submission_id
from airflow_ray_provider.launch import LocalHead, run
from airflow_ray_provider.launch.pool import PoolRecord, delete_idle_pools, live_holders
from airflow_ray_provider.local import LocalClusterOptions, LocalHeadInfo
from tests.fixtures.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ONE_CPU = LocalHead(LocalClusterOptions(num_cpus=1))
#: Holds a lease from another process: a run whose job sleeps (killed by the test).
HOLDER = """
import sys
from airflow_ray_provider.launch import LocalHead, run
from airflow_ray_provider.local import LocalClusterOptions
run([sys.executable, "-c", "import time; time.sleep(120)"], target=LocalHead(LocalClusterOptions(num_cpus=1)),
    name=sys.argv[2], pool={"name": sys.argv[1], "idle_ttl": 3, "lease_ttl": 4}, poll_interval=0.5)
"""


@pytest.fixture
def pool(local_registry: Path) -> Iterator[str]:
    """A pool name in a registry of the test's own; every head left in it is stopped at the end."""
    try:
        yield f"p{uuid.uuid4().hex[:8]}"
    finally:
        for record in list_clusters():
            stop_cluster(LocalHeadInfo.from_dict(record["info"]))


def _run(pool: str, name: str, code: str = "print('pool-job')", *, said: list[str] | None = None,
         target: LocalHead = ONE_CPU, **fields: Any) -> Any:  # fmt: skip
    options = {"name": pool, "idle_ttl": 3, "lease_ttl": 4, **fields}
    return run([sys.executable, "-c", code], target=target, name=name, pool=options, poll_interval=0.5,
               emit=lambda lines: None, say=(said if said is not None else []).append)  # fmt: skip


def _state(pool: str) -> tuple[PoolRecord | None, dict[str, float]]:
    raw, leases = LocalBackend().lease_store().read(pool)
    return (PoolRecord(**raw) if raw else None), leases


def _heads() -> list[int]:
    return [record["info"]["pid"] for record in list_clusters()]


def _jobs(pool: str) -> list[str]:
    backend = LocalBackend()
    client = backend.job_client(backend.attach(pool))
    return sorted(job.submission_id for job in client.list_jobs())


def test_ten_runs_started_together_share_one_cluster_and_it_stays_idle_ttl(pool: str) -> None:
    said: list[str] = []
    results: dict[str, Any] = {}

    def one(index: int) -> None:
        try:
            results[f"r{index}"] = _run(pool, f"r{index}", said=said)
        except BaseException as exc:
            results[f"r{index}"] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)

    assert all(result.state.status.value == "SUCCEEDED" for result in results.values()), results
    assert [m for m in said if m.startswith("Started pool")] == [f"Started pool {pool}'s Ray cluster"]
    assert len(_heads()) == 1
    assert _jobs(pool) == sorted(base_submission_id("cli", f"r{i}", "run") for i in range(10))
    record, leases = _state(pool)
    assert record is not None and record.idle_since is not None and not live_holders(leases, time.time())
    assert delete_idle_pools(LocalBackend()) == []  # idle for less than its 3 s
    eventually(lambda: delete_idle_pools(LocalBackend()) == [pool], timeout=10, what="the idle pool deleted")
    assert _heads() == [] and _state(pool) == (None, {})


def test_a_killed_holders_lease_expires_while_another_holds_the_cluster(pool: str) -> None:
    killed = subprocess.Popen([sys.executable, "-c", HOLDER, pool, "killed"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        dead = base_submission_id("cli", "killed", "run")
        eventually(lambda: dead in _state(pool)[1], timeout=120, what="the first holder's lease")
        pid = _heads()
        holder: dict[str, Any] = {}
        code = "import time; time.sleep(9); print('pool-job')"
        second = threading.Thread(target=lambda: holder.update(result=_run(pool, "alive", code)))
        second.start()
        alive = base_submission_id("cli", "alive", "run")
        eventually(lambda: alive in _state(pool)[1], timeout=60, what="the second holder's lease")
        os.kill(killed.pid, signal.SIGKILL)  # the run's process only: its job keeps running in Ray
        killed.wait()
        eventually(lambda: live_holders(_state(pool)[1], time.time()) == [alive], timeout=10,
                   what="the killed holder's lease expired")  # fmt: skip
        assert delete_idle_pools(LocalBackend()) == [] and _heads() == pid  # a live lease keeps it
        second.join(timeout=120)
        assert holder["result"].state.status.value == "SUCCEEDED"
        released = _state(pool)[0]
        assert released is not None and released.idle_since is not None and _heads() == pid
        eventually(
            lambda: delete_idle_pools(LocalBackend()) == [pool], timeout=10, what="the idle pool deleted"
        )
        assert time.time() - released.idle_since >= 3
        assert _heads() == []
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()


def test_a_lease_in_the_idle_window_keeps_the_cluster_and_another_spec_fails_before_submitting(
    pool: str,
) -> None:
    _run(pool, "first")
    first_release = _state(pool)[0]
    assert first_release is not None and first_release.idle_since is not None
    pid = _heads()

    with pytest.raises(RayInvalidInputError, match=r"local\.num_cpus \(pool: 1, this run: 2\)"):
        _run(pool, "other-spec", target=LocalHead(LocalClusterOptions(num_cpus=2)))
    assert _jobs(pool) == [base_submission_id("cli", "first", "run")]  # nothing submitted

    time.sleep(2)
    said: list[str] = []
    _run(pool, "second", said=said)
    assert any(m.startswith(f"Leased pool {pool}'s running Ray cluster") for m in said), said
    assert _heads() == pid  # no second start
    assert time.time() - first_release.idle_since >= 3  # the first idle window is over ...
    assert delete_idle_pools(LocalBackend()) == []  # ... but the second run's release started a new one
    eventually(lambda: delete_idle_pools(LocalBackend()) == [pool], timeout=10, what="the idle pool deleted")
    assert _heads() == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "airflow_ray_provider.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=240)


def test_the_cli_runs_on_a_pool_and_the_janitor_deletes_it_once_idle_never_while_leased(pool: str) -> None:
    from airflow_ray_provider.operators.ray_cluster import RayClusterJanitorOperator

    job = ["--", sys.executable, "-c", "print('cli-pool-job')"]
    out = _cli("run", "--local", "--pool", pool, "--idle-ttl", "1", "--name", "a", *job)
    assert out.returncode == 0, out.stderr
    assert "cli-pool-job" in out.stdout and f"Started pool {pool}'s Ray cluster" in out.stderr
    assert "Deleted" not in out.stderr and len(_heads()) == 1

    store = LocalBackend().lease_store()
    store.renew(pool, "a-live-holder", time.time() + 30)  # a run holding the pool (its lease is live)
    time.sleep(1.5)
    janitor = RayClusterJanitorOperator(task_id="janitor")
    assert janitor.execute({}) == [] and len(_heads()) == 1
    store.release(pool, "a-live-holder")
    assert RayClusterJanitorOperator(task_id="janitor", list_only=True).execute({}) == [pool]
    assert len(_heads()) == 1

    swept = _cli("clusters", "janitor")
    assert swept.returncode == 0, swept.stderr
    assert f"deleted {pool} (an idle pool)" in swept.stdout
    assert _heads() == [] and _state(pool) == (None, {})

    out = _cli("run", "--local", "--pool", pool, "--idle-ttl", "0", "--name", "b", *job)
    assert out.returncode == 0, out.stderr
    assert f"Deleted pool {pool}'s Ray cluster" in out.stderr
    assert _heads() == [] and _state(pool) == (None, {})


def test_replace_waits_for_the_last_holder_then_starts_the_cluster_of_the_new_spec(pool: str) -> None:
    old: dict[str, Any] = {}
    code = "import time; time.sleep(5); print('old-spec-job')"
    holder = threading.Thread(target=lambda: old.update(result=_run(pool, "old", code)))
    holder.start()
    eventually(lambda: base_submission_id("cli", "old", "run") in _state(pool)[1], timeout=120,
               what="the old spec's lease")  # fmt: skip
    first = _heads()
    said: list[str] = []
    _run(pool, "new", target=LocalHead(LocalClusterOptions(num_cpus=2)), replace=True, said=said)
    holder.join(timeout=60)

    assert old["result"].state.status.value == "SUCCEEDED"  # its cluster was not deleted under its job
    assert f"Deleted pool {pool}'s Ray cluster" in said and f"Started pool {pool}'s Ray cluster" in said
    record = _state(pool)[0]
    assert record is not None and record.fingerprint["local.num_cpus"] == "2"
    assert len(_heads()) == 1 and _heads() != first


def test_jobs_beyond_the_pools_capacity_queue_in_ray_until_their_cpus_are_free(
    pool: str, tmp_path: Path
) -> None:
    """Two runs started together on a 1-CPU pool, each entrypoint holding 1 CPU: the second job's driver
    starts only once the first has ended (it waits in Ray's queue; both succeed on the one cluster)."""
    code = (
        "import sys, time; s = time.time(); time.sleep(3); open(sys.argv[1], 'w').write(f'{s} {time.time()}')"
    )
    results: dict[str, Any] = {}

    def one(name: str) -> None:
        try:
            results[name] = run(
                [sys.executable, "-c", code, str(tmp_path / name)], target=ONE_CPU, name=name,
                pool={"name": pool, "idle_ttl": 3, "lease_ttl": 4}, poll_interval=0.5, entrypoint_num_cpus=1,
                emit=lambda lines: None, say=lambda line: None,
            )  # fmt: skip
        except BaseException as exc:
            results[name] = exc

    threads = [threading.Thread(target=one, args=(f"q{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)

    assert all(result.state.status.value == "SUCCEEDED" for result in results.values()), results
    assert len(_heads()) == 1
    first, second = sorted(tuple(map(float, (tmp_path / n).read_text().split())) for n in ("q0", "q1"))
    assert second[0] >= first[1] - 0.05, (first, second)  # never both on the one CPU at once

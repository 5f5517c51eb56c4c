"""The local lease store: one decider at a time across threads and processes, a dead holder's lock is
dropped, leases keep their expiry, releasing and forgetting remove what they say."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_ray_provider.clusters.local import LocalLeaseStore
from airflow_ray_provider.launch.pool import live_holders

pytestmark = pytest.mark.unit

HOLD_LOCK = """
import sys, time
from pathlib import Path
from airflow_ray_provider.clusters.local import LocalLeaseStore
with LocalLeaseStore(Path(sys.argv[1])).lock("p", timeout=5):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(root: Path, seconds: float) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", HOLD_LOCK, str(root), str(seconds)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_an_empty_store_reads_nothing_and_lists_no_pool(tmp_path: Path) -> None:
    store = LocalLeaseStore(tmp_path / "pools")
    assert store.read("p") == (None, {})
    assert store.pools() == []
    store.release("p", "nobody")  # nothing to end


def test_record_and_leases_round_trip_and_forgetting_keeps_only_the_lock(tmp_path: Path) -> None:
    store = LocalLeaseStore(tmp_path)
    store.write("p", {"cluster": "p", "idle_since": None})
    store.renew("p", "airflow-dag-task-run/1", 200.0)  # a holder with a slash stays one file
    store.renew("p", "b", 50.0)
    store.renew("p", "b", 300.0)  # renewing replaces the expiry
    assert store.read("p") == (
        {"cluster": "p", "idle_since": None},
        {"airflow-dag-task-run/1": 200.0, "b": 300.0},
    )
    assert store.pools() == ["p"]
    store.release("p", "b")
    assert store.read("p")[1] == {"airflow-dag-task-run/1": 200.0}
    with store.lock("p", timeout=1):
        store.write("p", None)
    assert store.read("p") == (None, {}) and store.pools() == []
    assert sorted(path.name for path in (tmp_path / "p").rglob("*") if path.is_file()) == ["lock"]


def test_an_expired_lease_is_read_with_its_expiry_and_is_not_live(tmp_path: Path) -> None:
    store, now = LocalLeaseStore(tmp_path), time.time()
    store.renew("p", "dead", now - 1)
    store.renew("p", "alive", now + 60)
    leases = store.read("p")[1]
    assert leases["dead"] == pytest.approx(now - 1)
    assert live_holders(leases, now) == ["alive"]


def test_threads_take_the_lock_one_at_a_time(tmp_path: Path) -> None:
    """Each thread opens the lock on its own: ``flock`` excludes them as it excludes processes, so no
    increment of the record is lost."""
    store = LocalLeaseStore(tmp_path)
    store.write("p", {"count": 0})

    def bump() -> None:
        for _ in range(25):
            with store.lock("p", timeout=30):
                count = store.read("p")[0]["count"]  # type: ignore[index]
                time.sleep(0.0005)
                store.write("p", {"count": count + 1})

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.read("p")[0] == {"count": 100}


def test_another_process_holding_the_lock_times_the_waiter_out_then_lets_it_in(tmp_path: Path) -> None:
    proc = _holder(tmp_path, 1.5)
    try:
        store = LocalLeaseStore(tmp_path)
        held = r"pool 'p': its lock is still held after 0\.2 s"
        with pytest.raises(TimeoutError, match=held), store.lock("p", timeout=0.2):
            pass
        started = time.monotonic()
        with store.lock("p", timeout=10):
            assert proc.poll() is not None or time.monotonic() - started > 0.5
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_loses_the_lock(tmp_path: Path) -> None:
    proc = _holder(tmp_path, 60)
    try:
        store = LocalLeaseStore(tmp_path)
        with pytest.raises(TimeoutError), store.lock("p", timeout=0.1):
            pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        started = time.monotonic()
        with store.lock("p", timeout=5):
            assert time.monotonic() - started < 1
    finally:
        proc.kill()
        proc.wait()

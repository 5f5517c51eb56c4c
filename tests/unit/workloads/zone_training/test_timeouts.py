"""``zone_timeout_s`` without Ray: the zone clocks, and what the driver does with a zone past its limit.

The clocks are exercised for real (shared memory, a watching thread); the scheduler runs with a task
runner of this test's own (the :class:`~airflow_ray_provider.workloads.zone_training.scheduler.TaskRunner`
protocol), which trains batches in-process and kills nothing: the engines' real kills are in the
integration tests (``tests/integration/workloads/zone_training``).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest

from airflow_ray_provider.workloads.zone_training.batching import AdaptiveBatcher, ZoneItem
from airflow_ray_provider.workloads.zone_training.config import BatchingConfig, parse_config
from airflow_ray_provider.workloads.zone_training.manifest import manifest_row
from airflow_ray_provider.workloads.zone_training.scheduler import ZoneScheduler
from airflow_ray_provider.workloads.zone_training.timeouts import ReportingZoneClock, SharedZoneClock
from airflow_ray_provider.workloads.zone_training.worker import ZoneWork

pytestmark = pytest.mark.unit


def test_the_shared_clock_says_which_zone_is_past_its_limit() -> None:
    clock = SharedZoneClock(multiprocessing.get_context("forkserver").RawArray("d", 2))
    assert clock.overdue(0.0) is None  # no zone runs
    clock.start(3)
    assert clock.overdue(60.0) is None
    time.sleep(0.05)
    assert clock.overdue(0.01) == 3
    clock.stop()
    assert clock.overdue(0.0) is None


def test_the_reporting_clock_reports_each_zone_past_its_limit_once() -> None:
    reported: list[int] = []
    with ReportingZoneClock(0.05, reported.append) as clock:
        clock.start(0)
        clock.stop()  # a quick zone: never reported
        clock.start(1)
        time.sleep(0.4)  # several polls past the limit
        clock.stop()
        clock.start(2)
        time.sleep(0.2)
    assert reported == [1, 2]
    assert not any(t.name == "zone-clock" for t in threading.enumerate())  # the thread ended with the task


class InProcessRunner:
    """Trains nothing: task ``0`` is reported killed for its zone ``1`` past the limit; the others succeed."""

    def __init__(self) -> None:
        self.batches: dict[int, list[str]] = {}
        self._done: list[int] = []
        self._expire: list[tuple[Any, int | None]] = []

    def submit(self, key: int, works: list[ZoneWork], chunks: list[Any]) -> int:
        self.batches[key] = [w.key for w in works]
        if key == 0:
            self._expire.append((key, 1))
        else:
            self._done.append(key)
        return key

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | str]]:
        done, self._done = self._done, []
        return [(key, _succeeded(self.batches[key])) for key in done]

    def expired(self) -> list[tuple[Any, int | None]]:
        out, self._expire = self._expire, []
        return out

    def close(self) -> None:
        pass


def _succeeded(zones: list[str]) -> dict[str, Any]:
    rows = [manifest_row(z, "succeeded", rows=10, attempt=1) for z in zones]
    return {"results": rows, "task_s": 0.01, "task_cpu_s": 0.01, "rows": 10 * len(zones)}


def test_a_zone_past_its_limit_fails_alone_and_its_batch_mates_train_again() -> None:
    cfg = parse_config(
        {
            "application": "app",
            "data_uri": "data.parquet",
            "zone_column": "zone",
            "label_column": "y",
            "output_uri": "/tmp/unused",
            "zone_timeout_s": 2,
            "batching": {"probe_zones": 3, "max_in_flight": 1},
        }
    )
    items = [ZoneItem(f"z{i}", 10) for i in range(5)]
    runner = InProcessRunner()
    scheduler = ZoneScheduler(
        cfg=cfg,
        runner=runner,
        sources=_Sources(),
        batcher=AdaptiveBatcher(items, 1, BatchingConfig(probe_zones=3, max_in_flight=1)),
        slots=1,
    )
    rows = {r["zone"]: r for r in scheduler.run()}
    assert runner.batches[0] == ["z0", "z1", "z2"]
    assert runner.batches[1][:2] == ["z0", "z2"]  # requeued, batched, ahead of the zones never sent
    assert sorted(rows) == [f"z{i}" for i in range(5)]
    assert rows["z1"]["status"] == "failed" and rows["z1"]["error"] == "timed out after 2s (zone_timeout_s)"
    assert rows["z1"]["duration_s"] == 2.0
    assert all(rows[z]["status"] == "succeeded" for z in ("z0", "z2", "z3", "z4"))


class _Sources:
    def works(self, batch: list[ZoneItem]) -> tuple[list[ZoneWork], list[Any]]:
        return [ZoneWork(z.key, z.rows, ()) for z in batch], []

    def attempt(self, key: str) -> int:
        return 1

"""Adaptive batching: probe, size by measured cost, shrink at the tail, isolate or requeue lost zones."""

from __future__ import annotations

import pytest

from airflow_ray_provider.workloads.zone_training.batching import AdaptiveBatcher, ZoneItem
from airflow_ray_provider.workloads.zone_training.config import BatchingConfig

pytestmark = pytest.mark.unit


def zones(n: int, rows: int = 100) -> list[ZoneItem]:
    return [ZoneItem(f"z{i:04d}", rows) for i in range(n)]


def test_probes_until_a_task_reports_then_sizes_by_cost() -> None:
    cfg = BatchingConfig(target_task_seconds=0.1, min_task_seconds=0.01, probe_zones=2)
    batcher = AdaptiveBatcher(zones(1000), slots=2, config=cfg)
    assert batcher.task_goal_seconds() is None
    assert len(batcher.next_batch()) == 2
    batcher.record(rows=200, seconds=0.002, zones=2)  # 1e-5 s/row -> 1 ms per 100-row zone
    assert batcher.seconds_per_row == pytest.approx(1e-5)
    assert len(batcher.next_batch()) == 100  # 0.1 s goal / 1 ms per zone


def test_slow_zones_get_one_per_task() -> None:
    batcher = AdaptiveBatcher(zones(50), slots=2, config=BatchingConfig(target_task_seconds=0.25))
    batcher.record(rows=100, seconds=0.3, zones=1)  # a zone takes longer than the goal
    assert [len(batcher.next_batch()) for _ in range(3)] == [1, 1, 1]


def test_batches_shrink_at_the_tail_and_cover_every_zone_once() -> None:
    cfg = BatchingConfig(target_task_seconds=0.2, min_task_seconds=0.01, probe_zones=1)
    batcher = AdaptiveBatcher(zones(400), slots=2, config=cfg)
    batcher.record(rows=100, seconds=0.001, zones=1)
    sizes, seen = [], []
    while batcher.pending:
        batch = batcher.next_batch()
        sizes.append(len(batch))
        seen.extend(z.key for z in batch)
    assert sorted(seen) == [z.key for z in zones(400)]
    assert sizes[0] == 100  # remaining 0.4 s of work / (2 x 2 slots) = 0.1 s per task
    assert sizes[-1] < sizes[0] and min(sizes) >= 1
    assert sizes == sorted(sizes, reverse=True)


def test_largest_zones_go_first_and_isolated_zones_jump_the_queue() -> None:
    items = [ZoneItem("small", 10), ZoneItem("big", 1000), ZoneItem("mid", 100)]
    batcher = AdaptiveBatcher(items, slots=1, config=BatchingConfig(probe_zones=1))
    assert batcher.next_batch() == [ZoneItem("big", 1000)]
    batcher.isolate([ZoneItem("x", 5), ZoneItem("y", 5)])
    assert batcher.next_batch() == [ZoneItem("x", 5)]
    assert batcher.next_batch() == [ZoneItem("y", 5)]
    assert batcher.pending == 2


def test_requeued_zones_come_back_batched_ahead_of_the_rest() -> None:
    items = [ZoneItem("a", 30), ZoneItem("b", 20), ZoneItem("c", 10)]
    batcher = AdaptiveBatcher(items, slots=1, config=BatchingConfig(probe_zones=2))
    assert batcher.next_batch() == items[:2]
    batcher.requeue([ZoneItem("a", 30)])  # its batch-mate timed out
    assert batcher.pending == 2
    assert batcher.next_batch() == [ZoneItem("a", 30), ZoneItem("c", 10)]


def test_max_zones_per_task_one_disables_batching() -> None:
    cfg = BatchingConfig(max_zones_per_task=1, probe_zones=1)
    batcher = AdaptiveBatcher(zones(10), slots=2, config=cfg)
    batcher.record(rows=100, seconds=1e-6, zones=1)
    assert all(len(batcher.next_batch()) == 1 for _ in range(10))
    assert batcher.next_batch() == []

"""The driver's scoring thread hands over to the engine: every block scored exactly once, same metrics.

No Ray here: the in-process engine takes over from the thread, as it does when ``auto`` picks it on a
running 2-CPU head (the Ray engine's handover runs in the integration tests and the benchmark).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_ray_provider.workloads.common.errors import DataError
from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.driver_scoring import DriverScorer, UnitQueue
from airflow_ray_provider.workloads.evaluation.engine import (
    plan_groups,
    run_engine,
    stream_in_process,
    this_machine,
)
from airflow_ray_provider.workloads.evaluation.phases import PhaseClock
from airflow_ray_provider.workloads.evaluation.preflight import PreflightRun

pytestmark = pytest.mark.unit


def test_the_queue_gives_every_unit_once_from_either_end() -> None:
    queue = UnitQueue(5)
    taken = [queue.front(), queue.back(), queue.front(), queue.back(), queue.front()]
    assert taken == [0, 4, 1, 3, 2]
    assert queue.front() is None and queue.back() is None and len(queue) == 0


def _score(cfg: EvalConfig, wait_for_driver_blocks: int | None) -> tuple[Any, int, int]:
    clock = PhaseClock()
    checks = PreflightRun(cfg, clock)
    try:
        pre = checks.result()
        groups = plan_groups(cfg, [this_machine()])
        driver = None
        if wait_for_driver_blocks is not None:
            driver = DriverScorer(cfg, checks, None)
            deadline = time.monotonic() + 60
            while driver.blocks < wait_for_driver_blocks and time.monotonic() < deadline:
                time.sleep(0.01)
        acc, nbytes = stream_in_process(cfg, pre, groups, None, clock, driver)
        return acc.finalize(), nbytes, driver.blocks if driver else 0
    finally:
        checks.close()


def test_blocks_the_driver_scored_are_kept_and_not_scored_again(
    eval_config: Callable[..., dict[str, Any]],
) -> None:
    cfg = EvalConfig.from_dict(eval_config(scoring={"block_rows": 1000}))
    alone, alone_bytes, _ = _score(cfg, None)
    shared, shared_bytes, by_driver = _score(cfg, 2)
    assert by_driver >= 2
    assert shared.rows == alone.rows == 20_000
    assert shared_bytes == alone_bytes  # each block read once, whoever scored it
    assert shared.overall == alone.overall
    assert shared.slice_rows == alone.slice_rows


def test_first_block_returns_once_the_thread_holds_a_block(
    eval_config: Callable[..., dict[str, Any]],
) -> None:
    cfg = EvalConfig.from_dict(eval_config(scoring={"block_rows": 1000}))
    checks = PreflightRun(cfg, PhaseClock())
    try:
        with DriverScorer(cfg, checks, None) as driver:
            driver.first_block()
            assert driver.blocks >= 1 and driver.first_at is not None
    finally:
        checks.close()


def test_first_block_raises_preflights_error(eval_config: Callable[..., dict[str, Any]]) -> None:
    cfg = EvalConfig.from_dict(
        eval_config(columns={"label": "clicked", "group": "request_id", "slices": ["no_such_column"]})
    )
    checks = PreflightRun(cfg, PhaseClock())
    try:
        with DriverScorer(cfg, checks, None) as driver, pytest.raises(DataError, match="no_such_column"):
            driver.first_block()
        assert driver.blocks == 0
    finally:
        checks.close()


def test_a_running_cluster_is_not_connected_to_when_preflight_fails(
    eval_config: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad input on a running cluster fails with preflight's error before Ray is imported or joined."""
    ray_session = importlib.import_module("airflow_ray_provider.workloads.common.ray_session")

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("connected to Ray although preflight failed")

    monkeypatch.setattr(ray_session, "ray_session", never)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # a running cluster (never reached)
    cfg = EvalConfig.from_dict(
        eval_config(columns={"label": "clicked", "group": "request_id", "slices": ["no_such_column"]})
    )
    checks = PreflightRun(cfg, PhaseClock())
    try:
        with pytest.raises(DataError, match="no_such_column"):
            run_engine(cfg, checks, None, None, PhaseClock())
    finally:
        checks.close()

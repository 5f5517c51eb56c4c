"""The engine rule (auto | ray | local), and an automatic in-process run that never starts Ray."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.engine import MAX_LOCAL_ROWS, break_even_rows, choose_engine
from airflow_ray_provider.workloads.evaluation.phases import PHASES
from airflow_ray_provider.workloads.evaluation.run import run_evaluation

pytestmark = pytest.mark.unit


def test_auto_picks_local_for_small_input_and_ray_above_the_configured_limit() -> None:
    small = choose_engine("auto", 20_000, cpus=2, nodes=1, standalone=True, local_max_rows=50_000)
    large = choose_engine("auto", 60_000, cpus=2, nodes=1, standalone=True, local_max_rows=50_000)
    assert small.engine == "local" and "too small" in small.reason and "20,000 rows" in small.reason
    assert large.engine == "ray" and "above the in-process limit" in large.reason


def test_multi_node_clusters_and_large_inputs_always_use_ray_under_auto() -> None:
    multi = choose_engine("auto", 10, cpus=64, nodes=3, standalone=False, local_max_rows=None)
    assert multi.engine == "ray" and "multi-node" in multi.reason
    huge = choose_engine("auto", MAX_LOCAL_ROWS + 1, cpus=1, nodes=1, standalone=True, local_max_rows=None)
    assert huge.engine == "ray"


def test_break_even_shrinks_with_more_cpus_and_is_capped() -> None:
    assert break_even_rows(1, 4.0) == MAX_LOCAL_ROWS  # one CPU: Ray's pool cannot beat one process
    two, sixteen = break_even_rows(2, 4.0), break_even_rows(16, 4.0)
    assert MAX_LOCAL_ROWS >= two > sixteen > 0
    assert break_even_rows(16, 12.0) > sixteen  # a standalone run also pays Ray's own start
    picked = choose_engine("auto", sixteen + 1, cpus=16, nodes=1, standalone=False, local_max_rows=None)
    assert picked.engine == "ray"


def test_forced_engines_win_and_a_large_local_run_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert choose_engine("ray", 5, cpus=2, nodes=1, standalone=True, local_max_rows=None).engine == "ray"
    with caplog.at_level(logging.WARNING):
        forced = choose_engine("local", 200, cpus=2, nodes=2, standalone=False, local_max_rows=100)
    assert forced.engine == "local"
    assert (
        "engine: local on 200 rows, 2 node(s)" in caplog.text and "engine: auto would use Ray" in caplog.text
    )


def test_bad_engine_value_is_named_with_the_fix() -> None:
    raw = {"data_uri": "d", "columns": {"label": "y", "group": "g"}, "models": {"a": "a.pkl", "b": "b.pkl"}}
    with pytest.raises(ConfigError) as info:
        EvalConfig.from_dict({**raw, "output_uri": "o", "baseline": "a", "engine": "spark"})
    assert "'engine' must be one of ['auto', 'ray', 'local'], got 'spark'" in str(info.value)
    with pytest.raises(ConfigError, match="'local_max_rows' must be an integer >= 0"):
        EvalConfig.from_dict({**raw, "output_uri": "o", "baseline": "a", "local_max_rows": -1})
    assert EvalConfig.from_dict({**raw, "output_uri": "o", "baseline": "a"}).engine == "auto"


def test_small_standalone_run_scores_in_process_without_starting_ray(
    eval_config: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR"):
        monkeypatch.delenv(name, raising=False)
    was_imported = "ray" in sys.modules
    doc = run_evaluation(eval_config())
    engine, timings = doc["run"]["engine"], doc["run"]["timings"]
    assert engine["name"] == "local" and engine["reason"].startswith("auto: too small"), engine
    assert doc["run"]["ray_session"] == "none" and timings["ray_init_s"] is None
    assert set(PHASES) <= set(timings) and timings["scoring_s"] > 0 and timings["first_row_s"] > 0
    assert doc["data"]["rows"] == 20_000
    if not was_imported:
        assert "ray" not in sys.modules, "the in-process engine must not even import Ray"
    with open(os.path.join(eval_config()["output_uri"], "metrics.json")) as fh:
        assert json.load(fh)["run"]["engine"] == engine

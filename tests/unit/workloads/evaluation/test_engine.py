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
from airflow_ray_provider.workloads.evaluation.engine import break_even_rows, choose_engine
from airflow_ray_provider.workloads.evaluation.phases import PHASES
from airflow_ray_provider.workloads.evaluation.run import run_evaluation

pytestmark = pytest.mark.unit


#: (rows, CPUs, nodes, standalone, local_max_rows) -> the engine auto picks, and a word of its reason.
AUTO_RULE = [
    # one node with <= 2 CPUs: in-process at every size (measured faster at 1M-40M rows)
    (1_000_000, 2, 1, True, None, "local", "<= 2 CPUs"),
    (5_000_000, 2, 1, True, None, "local", "<= 2 CPUs"),
    (20_000_000, 2, 1, True, None, "local", "<= 2 CPUs"),
    (40_000_000, 2, 1, True, None, "local", "<= 2 CPUs"),
    (40_000_000, 2, 1, False, None, "local", "<= 2 CPUs"),
    (400_000_000, 1, 1, False, None, "local", "<= 2 CPUs"),
    # more than one node: always Ray, whatever the size or the configured limit
    (10, 64, 3, False, None, "ray", "multi-node"),
    (10, 2, 2, False, None, "ray", "multi-node"),
    (10, 4, 2, False, 1_000_000, "ray", "multi-node"),
    # one node with more CPUs: the break-even (connected 2.5 s, standalone 7.5 s of fixed cost)
    (3_000_000, 4, 1, False, None, "local", "too small"),
    (4_000_000, 4, 1, False, None, "ray", "above the in-process limit"),
    (10_000_000, 4, 1, True, None, "local", "too small"),
    (11_000_000, 4, 1, True, None, "ray", "above the in-process limit"),
    (2_500_000, 16, 1, False, None, "local", "too small"),
    (3_000_000, 16, 1, False, None, "ray", "above the in-process limit"),
    (8_000_000, 16, 1, True, None, "local", "too small"),
    (9_000_000, 16, 1, True, None, "ray", "above the in-process limit"),
    # local_max_rows replaces the rule on one node
    (20_000, 2, 1, True, 50_000, "local", "too small"),
    (60_000, 2, 1, True, 50_000, "ray", "above the in-process limit"),
]


@pytest.mark.parametrize(("rows", "cpus", "nodes", "standalone", "limit", "engine", "why"), AUTO_RULE)
def test_auto_rule(
    rows: int, cpus: int, nodes: int, standalone: bool, limit: int | None, engine: str, why: str
) -> None:
    choice = choose_engine("auto", rows, cpus=cpus, nodes=nodes, standalone=standalone, local_max_rows=limit)
    assert (choice.engine, why in choice.reason) == (engine, True), choice.reason
    assert f"{rows:,} rows, {nodes} node(s), {cpus} CPUs" in choice.reason


def test_break_even_shrinks_with_more_cpus_and_grows_with_the_fixed_cost() -> None:
    assert break_even_rows(1, 2.5) is None and break_even_rows(2, 7.5) is None  # never Ray there
    four, sixteen = break_even_rows(4, 2.5), break_even_rows(16, 2.5)
    assert four is not None and sixteen is not None and four > sixteen > 2_500_000
    standalone = break_even_rows(16, 7.5)
    assert standalone is not None and standalone > sixteen  # a standalone run also pays Ray's own start


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
    assert engine["name"] == "local" and engine["reason"].startswith("auto: "), engine
    assert doc["run"]["ray_session"] == "none" and timings["ray_init_s"] is None
    assert set(PHASES) <= set(timings) and timings["scoring_s"] > 0 and timings["first_row_s"] > 0
    assert doc["data"]["rows"] == 20_000
    if not was_imported:
        assert "ray" not in sys.modules, "the in-process engine must not even import Ray"
    with open(os.path.join(eval_config()["output_uri"], "metrics.json")) as fh:
        assert json.load(fh)["run"]["engine"] == engine

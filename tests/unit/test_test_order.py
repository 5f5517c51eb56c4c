"""The order the xdist workers run the suite in (tests/fixtures/test_order.py)."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.test_order import MODULE_SECONDS, module_of, plan_runs, seconds_of

pytestmark = pytest.mark.unit


def test_each_run_starts_with_a_heavy_module_and_the_runs_weigh_and_count_about_the_same() -> None:
    seconds = {"real_services": 67, "zone_dag": 48, "rayjob_modes": 56, "cli": 85, "local": 51, "units": 0.1}
    counts = {"real_services": 1, "zone_dag": 3, "rayjob_modes": 2, "cli": 18, "local": 12, "units": 900}
    runs = plan_runs(counts, seconds, 2)
    assert sorted(m for run in runs for m in run) == sorted(counts)
    assert {run[0] for run in runs} == {"cli", "real_services"}  # the two heaviest, one per run
    weights = [sum(seconds[m] for m in run if m != "units") for run in runs]
    assert max(weights) - min(weights) <= 67  # dealt heaviest-first to the lighter run
    for run in runs:
        assert [seconds[m] for m in run] == sorted((seconds[m] for m in run), reverse=True)


def test_light_modules_even_out_the_item_counts_so_the_equal_split_keeps_the_plan() -> None:
    seconds = {"a": 40.0, "b": 30.0, **{f"u{i}": 0.5 for i in range(6)}}
    counts = {"a": 2, "b": 2, **{f"u{i}": 100 for i in range(6)}}
    runs = plan_runs(counts, seconds, 2)
    sizes = [sum(counts[m] for m in run) for run in runs]
    assert sizes == [302, 302] and [run[0] for run in runs] == ["a", "b"]


def test_an_unmeasured_integration_module_is_planned_as_a_middling_one_not_a_light_one() -> None:
    assert seconds_of("tests/integration/x/test_new.py", {}) >= 5.0 > seconds_of("tests/unit/test_new.py", {})
    assert seconds_of("tests/unit/test_new.py", {"tests/unit/test_new.py": 9.0}) == 9.0
    assert module_of("tests/unit/test_a.py::test_b[x::y]") == "tests/unit/test_a.py"


def test_the_measured_seconds_name_modules_that_exist() -> None:
    known = json.loads(MODULE_SECONDS.read_text())
    root = MODULE_SECONDS.parent.parent
    missing = [module for module in known if not (root / module).is_file()]
    assert known and not missing, f"stale entries in {MODULE_SECONDS.name} (make test-durations): {missing}"

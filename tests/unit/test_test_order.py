"""The order the xdist workers run the suite in (tests/fixtures/test_order.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.test_order import MODULE_SECONDS, module_of, plan_runs, seconds_of

REPO_ROOT = Path(__file__).resolve().parents[2]

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


def test_two_xdist_workers_each_start_on_an_integration_module_and_the_seconds_are_stored(
    tmp_path: Path,
) -> None:
    """A real ``pytest -n 2 --dist worksteal`` run of stand-in modules: in file order the unit modules
    would come first (``a_unit/`` sorts before ``integration/``) and each worker would start on one."""
    seen = tmp_path / "seen.txt"
    body = (
        "import os, pathlib\n"
        "def test_{n}():\n"
        f"    with pathlib.Path({str(seen)!r}).open('a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' {n}\\n')\n"
    )
    suite = tmp_path / "suite"
    for folder, names in (("a_unit", [f"u{i}" for i in range(8)]), ("integration", ["slow1", "slow2"])):
        (suite / folder).mkdir(parents=True)
        for name in names:
            (suite / folder / f"test_{name}.py").write_text(body.format(n=name))
    stored = tmp_path / "seconds.json"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.fixtures.test_order",
         "-n", "2", "--dist", "worksteal", "--store-module-seconds", str(stored),
         "--rootdir", str(suite), str(suite)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    firsts: dict[str, str] = {}
    for line in seen.read_text().splitlines():
        worker, name = line.split()
        firsts.setdefault(worker, name)
    assert sorted(firsts.values()) == ["slow1", "slow2"], seen.read_text()
    assert set(json.loads(stored.read_text())) == {
        f"{folder}/test_{name}.py"
        for folder, names in (("a_unit", [f"u{i}" for i in range(8)]), ("integration", ["slow1", "slow2"]))
        for name in names
    }

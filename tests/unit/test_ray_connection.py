"""The harness reports a test module that leaves its process connected to Ray, at the module's end only."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).parents[2]

#: A stand-in for the ``ray`` module: the check reads only ``ray.is_initialized`` and calls ``ray.shutdown``.
STAND_IN = """
import sys, types
ray = sys.modules.setdefault("ray", types.ModuleType("ray"))
ray.connected = getattr(ray, "connected", False)
ray.is_initialized = lambda: ray.connected
def _shutdown():
    ray.connected = False
ray.shutdown = _shutdown
"""


def _run(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, body in modules.items():
        (tmp_path / name).write_text(STAND_IN + textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "tests.fixtures.ray_connection", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip


def test_a_module_that_leaves_ray_connected_errors_on_its_last_test_only(tmp_path: Path):
    out = _run(
        tmp_path,
        {
            "test_a_leaky.py": """
                def test_connects():
                    ray.connected = True

                def test_still_connected():  # a module fixture may keep it open between its tests
                    assert ray.connected
            """,
            "test_b_next.py": """
                def test_starts_clean():
                    assert not ray.is_initialized()
            """,
        },
    )

    assert "3 passed, 1 error" in out.stdout, out.stdout
    assert "ERROR at teardown of test_still_connected" in out.stdout, out.stdout
    assert "test_a_leaky.py left this test process connected to Ray" in out.stdout


def test_a_module_that_disconnects_passes(tmp_path: Path):
    out = _run(
        tmp_path,
        {
            "test_tidy.py": """
                def test_connects_and_disconnects():
                    ray.connected = True
                    ray.shutdown()
            """,
        },
    )

    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout

"""``airflow-ray`` needs no Airflow: a run (local head or a Ray address) and the ``jobs`` / ``clusters``
commands load no ``airflow`` module at all, in a real subprocess with an empty ``AIRFLOW_HOME``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

#: Runs the CLI, then reports on stderr every ``airflow`` module the process loaded.
WRAPPER = """
import sys
from airflow_ray_provider import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
loaded = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
print("AIRFLOW_MODULES=" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No Airflow configuration anywhere: an empty AIRFLOW_HOME, the test's own local-head registry."""
    from airflow_ray_provider.clusters.local import REGISTRY_ENV

    (tmp_path / "home").mkdir()
    (tmp_path / "reg").mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    return {
        **environ,
        "AIRFLOW_HOME": str(tmp_path / "home"),
        REGISTRY_ENV: str(tmp_path / "reg"),
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def _cli(env: dict[str, str], *args: str) -> tuple[int, str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, timeout=300, env=env
    )
    report = [line for line in out.stderr.splitlines() if line.startswith("AIRFLOW_MODULES=")]
    assert report, out.stderr
    loaded = [m for m in report[-1].removeprefix("AIRFLOW_MODULES=").split(",") if m]
    return out.returncode, out.stdout + out.stderr, loaded


def test_a_local_run_imports_no_airflow(env: dict[str, str]):
    code, output, loaded = _cli(env, "run", "--local", "--", "python", "-c", "print('no-airflow-marker')")
    assert code == 0, output
    assert "no-airflow-marker" in output
    assert loaded == []
    assert list(Path(env["AIRFLOW_HOME"]).iterdir()) == []  # nothing wrote an Airflow config or DB


def test_a_run_on_an_address_and_the_jobs_and_clusters_commands_import_no_airflow(
    env: dict[str, str], ray_head, ray_head_token
):
    env = {**env, "RAY_AUTH_TOKEN": ray_head_token}
    address = ray_head.dashboard_url
    code, output, loaded = _cli(env, "run", "--ray-address", address, "--", "python", "-c", "print(1)")
    assert (code, loaded) == (0, []), output
    for args in (["jobs", "list", "--ray-address", address], ["clusters", "list"]):
        code, output, loaded = _cli(env, *args)
        assert (code, loaded) == (0, []), (args, output)


def test_bad_input_imports_no_airflow(env: dict[str, str], tmp_path: Path):
    code, output, loaded = _cli(env, "run", "--local", "--working-dir", str(tmp_path / "none"), "--", "x")
    assert code == 2 and "--working-dir" in output
    assert loaded == []

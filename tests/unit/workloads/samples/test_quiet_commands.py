"""The sample commands run without Python's RuntimeWarning about a module already in ``sys.modules``."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("module", ["click_log", "zones", "prepare"])
def test_python_dash_m_runs_the_sample_module_once(module: str) -> None:
    """The package used to import its modules eagerly, so runpy found them loaded and warned."""
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error::RuntimeWarning",
            "-m",
            f"airflow_ray_provider.workloads.samples.{module}",
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr


def test_the_package_still_offers_its_names_lazily() -> None:
    import airflow_ray_provider.workloads.samples as samples

    assert callable(samples.make_zone_dataset) and callable(samples.make_eval_dataset)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = samples.nope

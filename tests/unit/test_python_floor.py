"""One Python floor: README, setup.cfg, the lock, mypy and the Makefile agree; `make` enforces it."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
FLOOR = "3.11"  # numpy 2.4 / pandas 3 / scipy 1.17 / scikit-learn 1.9 (the lock's pins) need 3.11+


@pytest.mark.unit
def test_readme_setup_cfg_lock_mypy_and_makefile_name_the_same_floor():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    readme = (ROOT / "README.md").read_text()
    lock_header = (ROOT / "requirements.lock").read_text().splitlines()[1]
    makefile = (ROOT / "Makefile").read_text()
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]

    assert cfg["options"]["python_requires"].strip() == f">={FLOOR}"
    assert re.findall(r"Python (3\.\d+)\+", readme) == [FLOOR]
    assert f"--python-version {FLOOR}" in lock_header
    assert re.search(r"^PYTHON_FLOOR := (\S+)$", makefile, re.M).group(1) == FLOOR
    assert "--python-version $(PYTHON_FLOOR)" in makefile
    assert mypy["python_version"] == FLOOR
    assert sys.version_info[:2] >= tuple(map(int, FLOOR.split(".")))


@pytest.mark.unit
def test_make_refuses_a_python_below_the_floor_before_installing_anything(tmp_path):
    """Below the floor, ``make`` used to fail deep inside ``uv pip sync``."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "requirements.lock", "setup.cfg", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    old_python = tmp_path / "python3.10"
    old_python.write_text("#!/bin/sh\necho 3.10\n")  # answers the version probe as a 3.10 would
    old_python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    done = subprocess.run(
        ["make", "venv", f"PYTHON={old_python}"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert f"Python {FLOOR}+ is needed" in done.stderr and "is 3.10" in done.stderr
    assert not (tmp_path / ".venv").exists()

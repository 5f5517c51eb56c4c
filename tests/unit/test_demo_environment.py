"""``make demo``'s environment: no "empty cryptography key" warning, and a key that survives reruns."""

from __future__ import annotations

import os
import stat

import pytest

pytestmark = pytest.mark.unit


def test_the_demo_sets_a_kept_fernet_key(tmp_path, monkeypatch):
    from cryptography.fernet import Fernet

    from airflow_ray_provider.demo import configure_environment

    # configure_environment edits os.environ: give it a private copy without the keys it sets
    ours = ("AIRFLOW_HOME", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in ours})
    configure_environment(tmp_path, 1000, verbose=False)
    first = os.environ["AIRFLOW__CORE__FERNET_KEY"]
    Fernet(first.encode())  # a valid key (an empty one made Airflow warn and store values unencrypted)
    assert stat.S_IMODE((tmp_path / ".airflow" / "fernet.key").stat().st_mode) == 0o600

    del os.environ["AIRFLOW__CORE__FERNET_KEY"]
    configure_environment(tmp_path, 1000, verbose=False)
    assert os.environ["AIRFLOW__CORE__FERNET_KEY"] == first  # a rerun reads what the first run stored


def test_the_demo_hides_the_starlette_httpx_warning_airflow_triggers(tmp_path):
    """``dag.test()`` imports svcs.fastapi -> starlette.testclient, which warned on every ``make demo``.

    Starlette warns only where ``httpx2`` is missing (a user's install; the dev lock has it through the
    OpenLineage provider), so both runs here hide ``httpx2`` to stand for that install.
    """
    import subprocess
    import sys

    without_httpx2 = "import sys; sys.modules['httpx2'] = None; import starlette.testclient"
    code = (
        "import sys; sys.modules['httpx2'] = None\n"
        "import os, pathlib\n"
        "from airflow_ray_provider.demo import configure_environment\n"
        f"configure_environment(pathlib.Path({str(tmp_path)!r}), 1000, verbose=False)\n"
        "import svcs.fastapi\n"
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {without_httpx2!r}], check=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONWARNINGS"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "httpx" not in done.stderr
    bare = subprocess.run(
        [sys.executable, "-c", without_httpx2],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "Using `httpx` with `starlette.testclient` is deprecated" in bare.stderr  # the test can fail

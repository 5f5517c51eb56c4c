"""``make demo``'s environment: a Fernet key that survives reruns, and no warning its user cannot act on."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def test_the_demo_sets_a_kept_fernet_key(tmp_path, monkeypatch):
    from cryptography.fernet import Fernet

    from tools.demo import configure_environment

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
        "from tools.demo import configure_environment\n"
        f"configure_environment(pathlib.Path({str(tmp_path)!r}), 1000, verbose=False)\n"
        "import svcs.fastapi\n"
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {without_httpx2!r}], check=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONWARNINGS"))}
    root = Path(__file__).resolve().parents[2]  # the checkout, where `tools` imports from
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=root
    )
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


def test_the_demo_hides_the_pathspec_warning_airflow_triggers_on_the_dag_folder(tmp_path):
    """Airflow reads the shipped ``dags/.airflowignore`` (glob syntax) with pathspec's deprecated
    ``GitWildMatchPattern``, which warned on every ``make demo`` (Airflow shows its modules' deprecation
    warnings). The demo hides it after loading its DAG as ``run`` does, and in child processes; the DAG
    files are still found and the ignored folder skipped. No ``-W`` or ``PYTHONWARNINGS`` here: with
    either, Airflow would not add the rule that shows the warning.
    """
    import subprocess
    import sys
    from pathlib import Path

    dags = Path(__file__).resolve().parents[2] / "dags"
    assert (dags / ".airflowignore").exists()
    discover = (
        "from airflow.utils.file import find_dag_file_paths\n"
        f"paths = find_dag_file_paths({str(dags)!r}, safe_mode=False)\n"
        "assert any(p.endswith('nightly_model_validation.py') for p in paths), paths\n"
        "assert not any('laptop_job' in p for p in paths), paths\n"
    )
    configured = (
        "import pathlib\n"
        "from tools.demo import configure_environment, load_dag\n"
        f"configure_environment(pathlib.Path({str(tmp_path)!r}), 1000, verbose=False)\n"
        f"load_dag(pathlib.Path({str(dags / 'nightly_model_validation.py')!r}))\n"
        f"{discover}"
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {discover!r}], check=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONWARNINGS"))}
    env["AIRFLOW_HOME"] = str(tmp_path / "bare-home")

    def run(code: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", code]
        root = Path(__file__).resolve().parents[2]  # the checkout, where `tools` imports from
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=root)

    done = run(configured)  # Airflow logs captured warnings to stdout: read both streams
    assert done.returncode == 0, done.stderr
    assert "GitWildMatchPattern" not in done.stdout + done.stderr
    bare = run(discover)
    assert bare.returncode == 0, bare.stderr
    assert "GitWildMatchPattern ('gitwildmatch') is deprecated" in bare.stdout + bare.stderr  # can fail

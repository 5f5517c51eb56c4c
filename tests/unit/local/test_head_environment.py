"""The local head's environment: plain ``python`` is the interpreter Airflow runs; temp files go with it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.unit
def test_plain_python_in_the_heads_environment_is_this_interpreter(tmp_path, monkeypatch):
    """With the venv off PATH, a job's ``python`` is still the one with Ray, not the machine's."""
    from airflow_ray_provider.local import LocalHeadConfig, head_environment

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as under a scheduler started without the venv active
    env = head_environment(LocalHeadConfig(), str(tmp_path))
    probe = "import sys, ray; print(sys.prefix)"
    out = subprocess.run(["python", "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == sys.prefix
    assert env["PATH"].endswith("/usr/bin:/bin")  # the machine's PATH still follows


@pytest.mark.unit
def test_a_path_given_in_the_options_wins(tmp_path):
    from airflow_ray_provider.local import LocalHeadConfig, head_environment

    env = head_environment(LocalHeadConfig(env={"PATH": "/opt/x/bin"}), str(tmp_path))
    assert env["PATH"] == "/opt/x/bin"


@pytest.mark.unit
def test_temporary_files_of_the_head_go_in_its_temp_dir_unless_the_options_say_otherwise(tmp_path):
    """A killed dashboard's multiprocessing folders (``pymp-*``) go with the head, not into ``/tmp``."""
    from airflow_ray_provider.local import LocalHeadConfig, head_environment

    assert head_environment(LocalHeadConfig(), str(tmp_path))["TMPDIR"] == str(tmp_path)
    given = LocalHeadConfig(env={"TMPDIR": "/scratch"})
    assert head_environment(given, str(tmp_path))["TMPDIR"] == "/scratch"


@pytest.mark.unit
def test_the_heads_ray_start_is_rays_own_command_without_serve_jobs_or_state_imported():
    """The head's ``ray start`` is Ray's own command, without Ray's Serve, job and state CLIs (pandas,
    FastAPI) imported; it runs once its launcher has read the go-ahead the registered head sends."""
    from airflow_ray_provider.local import _LAUNCHER

    out = subprocess.run(
        [sys.executable, "-u", "-c", _LAUNCHER, "start", "--help"],
        input="1",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert "--head" in out.stdout and "--block" in out.stdout  # Ray's start command, all its options
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not {"ray.serve", "pandas", "fastapi"} & imported
    assert "ray.scripts.scripts" in imported

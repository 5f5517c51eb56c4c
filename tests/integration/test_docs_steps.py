"""Steps of docs/launch.md run as a reader runs them: the ``ray start --head`` recipe from a clone's root,
and ``launch.run`` called from Python (what goes to stdout, what to stderr, what a failed job raises).

``tests/unit/test_docs.py`` checks that every command of the docs parses; these run them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _block_with(page: Path, needle: str) -> str:
    """The fenced block of ``page`` that contains ``needle``."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", page.read_text(), re.M | re.S)
    (block,) = [b for b in blocks if needle in b]
    return block


def _ours(marker: str) -> list[int]:
    """Processes still running that carry this test's marker in their environment."""
    needle = f"ARP_DOCS_STEP={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def _orphaned_multiprocessing_folders(before: set[Path]) -> set[Path]:
    """New ``/tmp/pymp-*`` folders whose forkserver socket no process holds (a killed process's leftovers):
    a socket a live process has bound is listed in ``/proc/net/unix``."""
    bound = {line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:]}
    new = set(Path("/tmp").glob("pymp-*")) - before
    return {folder for folder in new if any(str(s) not in bound for s in folder.glob("listener-*"))}


def _answers(url: str, token: str) -> bool:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status == 200


def test_the_ray_start_recipe_runs_a_job_and_stops_only_its_own_head(
    ray_head: Any, ray_head_token: str, tmp_path: Path
) -> None:
    recipe = _block_with(REPO / "docs" / "launch.md", "ray start --head")
    marker = uuid.uuid4().hex
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    env.update(
        HOME=str(home),  # ray get-auth-token --generate writes ~/.ray/auth_token
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        ARP_DOCS_STEP=marker,
    )
    logs_before = set(Path("/tmp").glob("ray-*.log"))
    multiprocessing_before = set(Path("/tmp").glob("pymp-*"))  # another process's may come and go meanwhile
    try:
        done = subprocess.run(
            ["bash", "-c", recipe],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "sum of squares: 285" in done.stdout, done.stdout[-2000:]
        assert (home / ".ray" / "auth_token").is_file()
        deadline = time.monotonic() + 15
        while _ours(marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _ours(marker) == []  # the recipe's head is gone, every process of it
        assert _answers(f"{ray_head.dashboard_url}/api/version", ray_head_token)  # another head lives on
        new_logs = set(Path("/tmp").glob("ray-*.log")) - logs_before
        assert len(new_logs) == 1  # the log it keeps, and nothing else of the head in /tmp
        assert not Path(str(next(iter(new_logs)))[: -len(".log")]).exists()
        # the killed dashboard's multiprocessing folder was in the head's temp dir, not in /tmp
        assert _orphaned_multiprocessing_folders(multiprocessing_before) == set()
    finally:
        for pid in _ours(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for log in set(Path("/tmp").glob("ray-*.log")) - logs_before:
            log.unlink(missing_ok=True)


RUN_FROM_PYTHON = """
import sys
from airflow_ray_provider.launch import RayAddress, run

result = run(["python", "-c", "print('from the job')"], target=RayAddress(sys.argv[1], token=None))
print("status", result.state.status.value, file=sys.stderr)
"""


def _python_against(ray_head: Any, token: str, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter with the head's dashboard URL as its argument and its token in
    ``RAY_AUTH_TOKEN``, as a reader runs the page's Python."""
    env = {**os.environ, "RAY_AUTH_TOKEN": token}
    return subprocess.run([sys.executable, "-c", code, ray_head.dashboard_url], env=env, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip


def test_launch_run_from_python_writes_the_job_log_to_stdout_and_its_status_lines_to_stderr(
    ray_head: Any, ray_head_token: str
) -> None:
    done = _python_against(ray_head, ray_head_token, RUN_FROM_PYTHON)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "from the job" in done.stdout and "from the job" not in done.stderr
    assert "airflow-ray:" not in done.stdout
    assert re.search(r"^airflow-ray: Submitted Ray job ", done.stderr, re.M), done.stderr[-2000:]
    assert "status SUCCEEDED" in done.stderr  # the outcome is the return value


FAIL_FROM_PYTHON = """
import sys
from airflow_ray_provider.launch import RayAddress, RayJobFailedError, run

try:
    job = ["python", "-c", "print('last words'); raise SystemExit(3)"]
    run(job, target=RayAddress(sys.argv[1], token=None))
except RayJobFailedError as error:
    print("raised", type(error).__name__, "last words" in str(error))
"""


def test_a_failed_job_raises_the_error_that_launch_exports(ray_head: Any, ray_head_token: str) -> None:
    done = _python_against(ray_head, ray_head_token, FAIL_FROM_PYTHON)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "raised RayJobFailedError True" in done.stdout

"""The provider as users install it: the built wheel in a fresh virtualenv, driven by its own commands.

The wheel is built from a copy of the packaging files and the package (the checkout gets no ``build/``),
and installed with its ``kubernetes`` and ``workloads`` extras into a new virtualenv, pinned by
``requirements.lock`` as constraints (as Airflow's own constraint files pin an image). Every command then
runs from a folder outside the checkout, with a clean environment (its own ``HOME``, ``TMPDIR`` and
Airflow home; no ``PYTHONPATH``), so only the installed copy can be imported. Built and installed once
per test process: minutes of work, shared by the module's tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import airflow_ray_provider

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
#: Environment a test session marks its processes with (the head count, the CPU accounting).
PASSED_THROUGH = ("ARP_TEST_SESSION", "ARP_TEST_CPU_SESSION", "PYTEST_CURRENT_TEST", "LANG", "LC_ALL", "USER")


@dataclass
class Installed:
    """A virtualenv with the wheel installed, and a sandbox the commands run in."""

    wheel: Path
    venv: Path
    sandbox: Path
    marker: str
    seconds: dict[str, float] = field(default_factory=dict)

    def env(self, *, drop: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
        """A user's shell: the venv first on PATH, the sandbox's HOME, TMPDIR and Airflow home.

        :param drop: variables to leave unset (where the docs under test set them themselves).
        """
        passed = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        env = {
            **passed,
            "PATH": f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.sandbox / "home"),
            "TMPDIR": str(self.sandbox / "tmp"),
            "RAY_TMPDIR_ROOT": str(self.sandbox / "ray"),  # where the provider's local heads live
            "AIRFLOW_HOME": str(self.sandbox / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "RAY_USAGE_STATS_ENABLED": "0",
            "ARP_WHEEL_TEST": self.marker,
            **extra,
        }
        return {k: v for k, v in env.items() if k not in drop}

    def shell(self, script: str, *, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
        """A bash script in the sandbox, as a user types it (``AIRFLOW__CORE__LOAD_EXAMPLES`` left unset)."""
        return subprocess.run(
            ["bash", "-ec", script],
            cwd=self.sandbox / "work",
            env=self.env(drop=("AIRFLOW__CORE__LOAD_EXAMPLES",), **env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run(
        self, *argv: str, cwd: Path | None = None, timeout: float = 300, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """A command of the venv (``airflow``, ``airflow-ray``, ``python``) in the sandbox."""
        started = time.monotonic()
        done = subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]],
            cwd=cwd or self.sandbox / "work",
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        print(f"{' '.join(argv)[:80]}: rc {done.returncode} in {time.monotonic() - started:.1f} s")
        return done

    def processes(self) -> list[str]:
        """Processes still running that a command of this module started (by the marker they inherit)."""
        needle = f"ARP_WHEEL_TEST={self.marker}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    found.append(f"{entry.name} {command}")
            except OSError:
                continue
        return found


def _uv() -> str:
    uv = Path(sys.executable).with_name("uv")
    found = str(uv) if uv.exists() else shutil.which("uv")
    assert found, "uv is needed to build and install the wheel (make venv installs it into .venv)"
    return found


def _build_wheel(source: Path, out: Path) -> Path:
    """Build the wheel from a copy of what packaging reads, so the checkout gets no build folders."""
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "airflow_ray_provider",
        source / "airflow_ray_provider",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    subprocess.run(
        [_uv(), "build", "--wheel", "--out-dir", str(out), str(source)], check=True, capture_output=True
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    sandbox = Path(tempfile.mkdtemp(prefix="arpw-", dir="/tmp"))  # short: a head's socket paths fit 107 bytes
    for name in ("home", "tmp", "ray", "airflow", "work"):
        (sandbox / name).mkdir(parents=True)
    (root / "source").mkdir()
    seconds: dict[str, float] = {}
    started = time.monotonic()
    wheel = _build_wheel(root / "source", root / "dist")
    seconds["build"] = time.monotonic() - started
    venv = root / "venv"
    started = time.monotonic()
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([_uv(), "venv", "--quiet", "--python", base_python, str(venv)], check=True)
    requirement = f"airflow-ray-provider[kubernetes,workloads] @ {wheel.as_uri()}"
    install = [_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), requirement]
    subprocess.run(
        [*install, "--constraint", str(REPO / "requirements.lock")], check=True, capture_output=True
    )
    seconds["install"] = time.monotonic() - started
    env = Installed(wheel, venv, sandbox, uuid.uuid4().hex, seconds)
    print(f"wheel {wheel.name}: {wheel.stat().st_size:,} bytes; build {seconds['build']:.1f} s, "
          f"venv + install {seconds['install']:.1f} s")  # fmt: skip
    try:
        yield env
    finally:
        for line in env.processes():  # a failed test's leftovers: ours by the marker, ended by pid
            pid = int(line.split()[0])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        shutil.rmtree(sandbox, ignore_errors=True)


def test_the_wheel_carries_its_licence_its_type_marker_and_one_version(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    version = airflow_ray_provider.__version__
    info = f"airflow_ray_provider-{version}.dist-info"
    assert installed.wheel.name == f"airflow_ray_provider-{version}-py3-none-any.whl"
    assert "airflow_ray_provider/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    licence = zipfile.ZipFile(installed.wheel).read(f"{info}/licenses/LICENSE").decode()
    assert "Apache License" in licence and "Version 2.0" in licence
    assert not [n for n in names if n.startswith(("tests/", "dags/", "benchmarks/"))]
    shown = installed.run(
        "python", "-c", "import airflow_ray_provider as p; print(p.__file__, p.__version__)"
    )
    where, shown_version = shown.stdout.split()
    assert where.startswith(str(installed.venv)) and shown_version == version, shown.stdout  # not the clone
    metadata = installed.run(
        "python", "-c", "import importlib.metadata as m; print(m.version('airflow-ray-provider'))"
    )
    assert metadata.stdout.strip() == version


def test_airflow_lists_the_provider_and_its_connection_types(installed: Installed) -> None:
    providers = installed.run("airflow", "providers", "list", "-o", "json")
    assert providers.returncode == 0, providers.stderr[-2000:]
    listed = {p["package_name"]: p for p in json.loads(providers.stdout)}
    assert listed["airflow-ray-provider"]["version"] == airflow_ray_provider.__version__
    hooks = installed.run("airflow", "providers", "hooks", "-o", "json")
    assert hooks.returncode == 0, hooks.stderr[-2000:]
    ours = {
        h["connection_type"]: h["class"]
        for h in json.loads(hooks.stdout)
        if h["package_name"] == "airflow-ray-provider"
    }
    assert ours == {
        "ray": "airflow_ray_provider.hooks.ray_job.RayJobHook",
        "kuberay": "airflow_ray_provider.hooks.kuberay.KubeRayHook",
    }


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


def test_airflow_ray_run_local_succeeds_and_leaves_nothing(installed: Installed) -> None:
    code = "import ray; ray.init(); print('answer', ray.get(ray.remote(lambda: 6 * 7).remote()))"

    done = installed.run("airflow-ray", "run", "--local", "--", "python", "-c", code)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "answer 42" in done.stdout  # the job's log on stdout
    assert re.search(r"^airflow-ray: Ray job \S+ SUCCEEDED", done.stderr, re.M), done.stderr[-2000:]
    deadline = time.monotonic() + 20
    while installed.processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert installed.processes() == []
    for name in ("tmp", "ray", "home"):
        assert _files_under(installed.sandbox / name) == [], name
    assert [p.name for p in (installed.sandbox / "ray").iterdir()] == []  # the head's folder is gone


def test_a_shipped_dag_runs_with_dag_test_from_the_installed_package(installed: Installed) -> None:
    dags = installed.sandbox / "airflow" / "dags"
    dags.mkdir(exist_ok=True)
    shutil.copy2(REPO / "dags" / "launch_from_laptop.py", dags)
    shutil.copytree(REPO / "dags" / "laptop_job", dags / "laptop_job")
    assert installed.run("airflow", "db", "migrate").returncode == 0
    code = (
        "import runpy; run = runpy.run_path('launch_from_laptop.py')['dag'].test(); print('state', run.state)"
    )

    done = installed.run("python", "-c", code, cwd=dags)

    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "sum of squares: 285" in output
    assert "state success" in done.stdout, output[-3000:]


def test_the_trying_locally_page_runs_as_written(installed: Installed) -> None:
    page = (REPO / "docs" / "trying-locally.md").read_text()
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", page, re.M | re.S)
    setup = next(body for lang, body in blocks if lang == "bash" and "airflow db migrate" in body)
    example = next(body for lang, body in blocks if lang == "python")
    quoted_error = re.search(r"`(Cannot create DagRun for DAG try_it[^`]*)`", page)
    assert quoted_error, "the page no longer quotes the error of a DAG file outside the DAGs folder"
    home = installed.sandbox / "page-airflow"
    (installed.sandbox / "work" / "try_it.py").write_text(example)
    script = (
        f"{setup}\n"
        "python try_it.py > elsewhere.log 2>&1 && exit 9  # outside the DAGs folder: must fail\n"
        'mkdir -p "$AIRFLOW_HOME/dags" && cp try_it.py "$AIRFLOW_HOME/dags/"\n'
        'python "$AIRFLOW_HOME/dags/try_it.py"\n'
    )

    done = installed.shell(script, AIRFLOW_HOME=str(home))

    elsewhere = (installed.sandbox / "work" / "elsewhere.log").read_text()
    assert " ".join(quoted_error.group(1).split()) in elsewhere, elsewhere[-2000:]
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    output = elsewhere + done.stdout + done.stderr
    assert "example_" not in output  # the page's export kept Airflow's example DAGs out
    assert re.search(r"DagRun Finished: dag_id=try_it, .*state=success", output), output[-3000:]
    deadline = time.monotonic() + 20
    while installed.processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert installed.processes() == []  # the teardown task stopped the local head

"""Benchmark: the wheel's size, and its install time into a clean virtualenv, as users install it.

The wheel is built as ``tests/integration/packaging/test_wheel.py`` builds it (``uv build --wheel`` from a
copy of the packaging files), then installed with its ``kubernetes`` and ``workloads`` extras into a new
virtualenv, pinned by ``requirements.lock`` as constraints, three ways:

* **uv, warm cache**: what the test suite and a CI image build with a cache pay (files hard-linked);
* **uv, no cache**: every dependency downloaded and unpacked (``--no-cache``), as a first image build;
* **pip, no cache**: ``pip install --no-cache-dir``, the command the README gives.

Each figure is the install command's wall clock; the venv's size on disk is reported too.

Run: ``python -m benchmarks.bench_wheel [--ways uv_warm uv_cold pip_cold]``; writes
``benchmarks/out/bench_wheel.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.bench_evaluate import OUT

REPO = Path(__file__).resolve().parents[1]
WAYS = ("uv_warm", "uv_cold", "pip_cold")


def _uv() -> str:
    return str(Path(sys.executable).with_name("uv"))


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _install(way: str, wheel: Path, venv: Path) -> float:
    base_python = getattr(sys, "_base_executable", sys.executable)
    requirement = f"airflow-ray-provider[kubernetes,workloads] @ {wheel.as_uri()}"
    constraint = ["--constraint", str(REPO / "requirements.lock")]
    started = time.monotonic()
    if way.startswith("uv"):
        subprocess.run([_uv(), "venv", "--quiet", "--python", base_python, str(venv)], check=True)
        cache = ["--no-cache"] if way == "uv_cold" else []
        cmd = [_uv(), "pip", "install", "--quiet", *cache, "--python", str(venv / "bin" / "python")]
        subprocess.run([*cmd, requirement, *constraint], check=True)
    else:
        subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
        pip = [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            "--no-cache-dir",
            "--disable-pip-version-check",
        ]
        subprocess.run([*pip, requirement, *constraint], check=True)
    return time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    """Build the wheel once, install it each way into a fresh venv, print the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_wheel")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-wheel-"))
    try:
        source = work / "source"
        source.mkdir()
        for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
            shutil.copy2(REPO / name, source / name)
        shutil.copytree(
            REPO / "airflow_ray_provider",
            source / "airflow_ray_provider",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        started = time.monotonic()
        subprocess.run(
            [_uv(), "build", "--quiet", "--wheel", "--out-dir", str(work / "dist"), str(source)], check=True
        )
        build_s = time.monotonic() - started
        (wheel,) = (work / "dist").glob("*.whl")
        result: dict[str, object] = {
            "wheel": wheel.name,
            "wheel_bytes": wheel.stat().st_size,
            "build_s": round(build_s, 1),
        }
        for way in args.ways:
            venv = work / f"venv-{way}"
            result[f"{way}_s"] = round(_install(way, wheel, venv), 1)
            result[f"{way}_venv_bytes"] = _du(venv)
            print(f"{way}: {result[f'{way}_s']} s, venv {result[f'{way}_venv_bytes']:,} bytes", flush=True)
            shutil.rmtree(venv)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "bench_wheel.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

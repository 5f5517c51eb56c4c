"""Build the compose stack's images, each tagged by a hash of what it is built from.

An image whose tag exists is reused, so a second run on the same machine builds nothing and a changed
input (a Dockerfile, the lock, the provider's code, a base image) rebuilds only what depends on it.

``--base standin`` (the default, for machines without a registry) builds stand-in base images from a
``debootstrap`` Debian (see ``tests/compose/standin/``); ``--base official`` builds the real
Dockerfiles on the official images, as a user's ``docker compose up --build`` does.

Run as ``python -m tests.compose.images`` to build and print the ``KEY=tag`` lines docker-compose.yaml
reads (``POSTGRES_IMAGE``, ``AIRFLOW_IMAGE``, ``RAY_IMAGE``, ...).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "standin"
#: What the real Dockerfiles install (the root .dockerignore sends exactly these).
PROVIDER_FILES = ("setup.cfg", "pyproject.toml", "README.md", "requirements.lock", "airflow_ray_provider")
OFFICIAL = {
    "POSTGRES_IMAGE": "postgres:16",
    "AIRFLOW_BASE_IMAGE": "apache/airflow:3.3.2-python3.11",
    "RAY_BASE_IMAGE": "rayproject/ray:2.60.0-py311",
}
DEBOOTSTRAP = ("debootstrap", "--variant=minbase", "bookworm")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_TIMEOUT_S = 900


def _files(root: Path, names: Iterable[str]) -> list[Path]:
    """The files under ``root`` named by ``names`` (files or folders), sorted, caches left out."""
    found: list[Path] = []
    for name in names:
        path = root / name
        if path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"image input {path} is missing")
    return sorted(p for p in found if p.suffix != ".pyc")


def input_hash(dockerfile: Path, root: Path, names: Iterable[str], args: dict[str, str]) -> str:
    """A short hash of a Dockerfile, its context files (names and contents) and its build arguments."""
    digest = hashlib.sha256(dockerfile.read_bytes())
    for path in _files(root, names):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for key in sorted(args):
        digest.update(f"{key}={args[key]}\0".encode())
    return digest.hexdigest()[:16]


def image_exists(tag: str) -> bool:
    """Whether the local Docker daemon has ``tag``."""
    probe = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return probe.returncode == 0


def _log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def build(
    repository: str, dockerfile: Path, context: Path, names: Iterable[str], args: dict[str, str]
) -> str:
    """Build ``dockerfile`` in ``context`` as ``repository:<input hash>`` unless that tag exists."""
    names = tuple(names)
    tag = f"{repository}:{input_hash(dockerfile, context, names, args)}"
    if image_exists(tag):
        _log(f"{tag}: present, reused")
        return tag
    started = time.monotonic()
    command = ["docker", "build", "--network", "host", "-f", str(dockerfile), "-t", tag]
    for key, value in args.items():
        command += ["--build-arg", f"{key}={value}"]
    _log(f"{tag}: building {dockerfile.name}")
    # The legacy builder: the same on Docker 20.10 and on newer CLIs without buildx.
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    subprocess.run([*command, str(context)], check=True, env=env, timeout=BUILD_TIMEOUT_S)
    _log(f"{tag}: built in {time.monotonic() - started:.0f} s")
    return tag


def debian_base() -> str:
    """A minimal Debian bookworm image made with debootstrap (no registry needed), reused when present."""
    command = (*DEBOOTSTRAP, DEBIAN_MIRROR)
    tag = "arp-standin/debian:" + hashlib.sha256(" ".join(command).encode()).hexdigest()[:16]
    if image_exists(tag):
        _log(f"{tag}: present, reused")
        return tag
    if shutil.which("debootstrap") is None:
        raise SystemExit("the stand-in images need debootstrap: apt-get install -y debootstrap")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="arp-deb-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _log(f"{tag}: debootstrap into {rootfs}")
        subprocess.run([*DEBOOTSTRAP, str(rootfs), DEBIAN_MIRROR], check=True, timeout=BUILD_TIMEOUT_S,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout, check=True, timeout=BUILD_TIMEOUT_S,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        if tar.wait() != 0:
            raise SystemExit(f"tar of {rootfs} failed")
    _log(f"{tag}: imported in {time.monotonic() - started:.0f} s")
    return tag


def standin_bases() -> dict[str, str]:
    """Stand-ins for the official Postgres, Airflow and Ray images (see ``tests/compose/standin/``)."""
    debian = debian_base()
    with tempfile.TemporaryDirectory(prefix="arp-ctx-", dir="/var/tmp") as tmp:
        context = Path(tmp)
        for path in STANDIN.iterdir():
            shutil.copy2(path, context / path.name)
        shutil.copy2(REPO / "requirements.lock", context / "requirements.lock")
        shutil.copy2(HOST_CA, context / "host-ca.crt")
        python_inputs = ("requirements.lock", "host-ca.crt")

        def standin(name: str, inputs: tuple[str, ...]) -> str:
            dockerfile = context / f"{name}.Dockerfile"
            return build(f"arp-standin/{name}", dockerfile, context, inputs, {"DEBIAN_IMAGE": debian})

        return {
            "POSTGRES_IMAGE": standin("postgres", ("postgres-entrypoint.sh",)),
            "AIRFLOW_BASE_IMAGE": standin("airflow-base", (*python_inputs, "airflow-entrypoint.sh")),
            "RAY_BASE_IMAGE": standin("ray-base", python_inputs),
        }


def build_all(base: str = "standin") -> dict[str, str]:
    """Every image the stack runs, as the variables docker-compose.yaml reads."""
    bases = standin_bases() if base == "standin" else dict(OFFICIAL)
    airflow = build(
        "airflow-ray-provider/airflow", REPO / "docker/airflow.Dockerfile", REPO, PROVIDER_FILES,
        {"AIRFLOW_BASE_IMAGE": bases["AIRFLOW_BASE_IMAGE"]},
    )  # fmt: skip
    ray = build(
        "airflow-ray-provider/ray", REPO / "docker/ray.Dockerfile", REPO, PROVIDER_FILES,
        {"RAY_BASE_IMAGE": bases["RAY_BASE_IMAGE"]},
    )  # fmt: skip
    return {**bases, "AIRFLOW_IMAGE": airflow, "RAY_IMAGE": ray}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", choices=("standin", "official"), default="standin")
    for key, tag in build_all(parser.parse_args(argv).base).items():
        print(f"{key}={tag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""docker-compose.yaml and the Dockerfiles keep the properties ``make compose-test`` relies on and checks
end to end (docs/compose.md): no secret defaults, local-only ports, one build per image, healthchecks,
base images as build arguments, images tagged by a hash of their inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.compose import images

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]
SECRETS = ("RAY_AUTH_TOKEN", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY")


def test_secrets_have_no_defaults() -> None:
    text = (REPO / "docker-compose.yaml").read_text()
    for name in SECRETS:
        uses = re.findall(r"\$\{" + name + r"(:[?-][^}]*)?\}", text)
        assert uses, f"{name} is not used"
        assert all(use.startswith(":?") for use in uses), f"{name} must be ${{{name}:?...}}: {uses}"
    assert "ALL_ADMINS" not in text


def test_ports_are_published_on_localhost_only() -> None:
    published = [port for service in SERVICES.values() for port in service.get("ports", [])]
    assert published
    assert all(str(port).startswith("127.0.0.1:") for port in published), published


def test_each_image_is_built_by_one_service_and_reused_by_tag() -> None:
    builders = {name: s["build"]["dockerfile"] for name, s in SERVICES.items() if "build" in s}
    assert builders == {"airflow-init": "docker/airflow.Dockerfile", "ray-head": "docker/ray.Dockerfile"}
    for builder, users in (("airflow-init", "airflow-"), ("ray-head", "ray-")):
        tag = SERVICES[builder]["image"]
        assert all(s["image"] == tag for name, s in SERVICES.items() if name.startswith(users)), tag


def test_every_long_running_service_has_a_healthcheck() -> None:
    missing = [name for name, s in SERVICES.items() if name != "airflow-init" and "healthcheck" not in s]
    assert not missing


def test_no_recursive_permission_changes_on_start() -> None:
    init = " ".join(SERVICES["airflow-init"]["command"])
    assert "chmod -R" not in init and "chown -R" not in init, init


@pytest.mark.parametrize(
    ("dockerfile", "arg"), [("airflow", "AIRFLOW_BASE_IMAGE"), ("ray", "RAY_BASE_IMAGE")]
)
def test_dockerfiles_take_their_base_as_an_argument_and_pin_by_the_lock(dockerfile: str, arg: str) -> None:
    text = (REPO / f"docker/{dockerfile}.Dockerfile").read_text()
    assert f"FROM ${{{arg}}}" in text
    assert "-c /" in text and "requirements.lock" in text
    assert ">=" not in text, "open version ranges in the image"


def test_image_tags_follow_their_inputs(tmp_path: Path) -> None:
    dockerfile = tmp_path / "x.Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    first = images.input_hash(dockerfile, tmp_path, ["pkg"], {"BASE": "b:1"})
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert images.input_hash(dockerfile, tmp_path, ["pkg"], {"BASE": "b:1"}) == first
    assert images.input_hash(dockerfile, tmp_path, ["pkg"], {"BASE": "b:2"}) != first
    (tmp_path / "pkg" / "a.py").write_text("A = 2\n")
    assert images.input_hash(dockerfile, tmp_path, ["pkg"], {"BASE": "b:1"}) != first
    with pytest.raises(FileNotFoundError, match="missing"):
        images.input_hash(dockerfile, tmp_path, ["nope"], {})


@pytest.mark.parametrize("dockerfile", ["airflow", "ray"])
def test_every_install_of_the_package_has_the_module_its_version_is_read_from(dockerfile: str) -> None:
    attr = re.search(r"^version = attr: (\w+)\.__version__$", (REPO / "setup.cfg").read_text(), re.M)
    assert attr, "setup.cfg reads the version from the package"
    package = attr.group(1)
    instructions = re.sub(r"\\\n", " ", (REPO / f"docker/{dockerfile}.Dockerfile").read_text()).splitlines()
    copied: list[str] = []
    for line in instructions:
        if line.startswith("COPY "):
            copied += line.split()[1:-1]
        elif line.startswith("RUN ") and re.search(r"pip install[^&]*/airflow-ray-provider(?![/\w-])", line):
            assert {package, f"{package}/__init__.py"} & set(copied), (dockerfile, line)

"""Every Job API client the Airflow face makes has its credentials registered with Airflow's secrets masker:
a ``ray`` connection's, and a cluster handle's through the backend the face made (a target's, the hook's).
No cluster is reached: a local handle's token is read from its file."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from airflow_ray_provider.clusters import RayClusterHandle
from airflow_ray_provider.hooks import backend_for_connection, job_api_target, target_from_ref
from airflow_ray_provider.launch import ClusterTarget

pytestmark = pytest.mark.unit


def _handle(tmp_path: Path) -> tuple[RayClusterHandle, str]:
    token = f"tok-{secrets.token_hex(16)}"
    path = tmp_path / "token"
    path.write_text(token)
    path.chmod(0o600)
    handle = RayClusterHandle(backend="local", name="c1", dashboard_url="http://127.0.0.1:1",
                              auth_token_file=str(path))  # fmt: skip
    return handle, token


def _masked(token: str) -> bool:
    from airflow.sdk.log import redact

    return redact(f"leak={token}") == "leak=***"


def test_a_target_of_a_backend_the_face_made_masks_its_client(tmp_path: Path) -> None:
    handle, token = _handle(tmp_path)
    target = ClusterTarget(handle=handle, backend=backend_for_connection(None))
    assert not _masked(token)
    assert target.dashboard() is not None and _masked(token)


def test_a_deferred_runs_target_masks_its_client(tmp_path: Path) -> None:
    handle, token = _handle(tmp_path)
    target = target_from_ref({"handle": handle.to_dict(), "owned": False})
    assert target.dashboard() is not None and _masked(token)


def test_an_operators_cluster_handle_masks_its_client(tmp_path: Path) -> None:
    handle, token = _handle(tmp_path)
    assert job_api_target(handle.to_dict(), None).dashboard().secrets() and _masked(token)

"""KubeRay fidelity against the emulator and the test KubeRay controller (issue 16).

The token Secret KubeRay names for long cluster names, the controller's Warning events read by the create
path (sync and deferred), and KubeRay's own samples through the manifest path.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures.kuberay import CONTROLLER_AGENT, HEAD_MODE

RUN_ID = "manual__2024-01-01T00:00:00+00:00"


def _context(task_id: str, dag_id: str = "fidelity_tests", run_id: str = RUN_ID) -> dict:
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "run_id": run_id}


def _provider_calls(kube: Any, since: int) -> list[tuple[str, str, str]]:
    return [call for call in kube.calls[since:] if call[0] != CONTROLLER_AGENT]


@pytest.mark.integration
def test_53_character_name_is_ready_through_the_truncated_token_secret(
    kuberay_controller, kuberay_conn, kuberay_client, ray_head_token
):
    """KubeRay names the token Secret after the last 50 characters; the provider reads exactly that one."""
    from airflow_ray_provider.hooks.kuberay import KubeRayHook
    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator, DeleteRayClusterOperator

    name = "fidelity-" + "n" * 40 + "-end"
    assert len(name) == 53
    op = CreateRayClusterOperator(
        task_id="long", cluster_conn_id=kuberay_conn, cluster_name=name, poll_interval=0.2, ready_timeout=60,
        spec={"annotations": {HEAD_MODE: "shared"}},
    )  # fmt: skip
    handle = op.execute(_context("long"))
    try:
        assert handle["name"] == name and handle["auth_token_secret"] == name[3:]
        token = KubeRayHook(kuberay_conn_id=kuberay_conn).read_auth_token(secret_name=name[3:])
        assert token == ray_head_token
    finally:
        DeleteRayClusterOperator(task_id="delete", cluster=handle).execute(_context("delete"))
    assert kuberay_client.find_cluster(name) is None

"""A head started with ``ray start --head`` (token auth), not by this provider, attached by its address."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayClusterNotReadyError, RayInvalidInputError
from airflow_ray_provider.operators.ray_cluster import AttachRayClusterOperator
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from tests.fixtures.ray_job import StandInTI, context_for

pytestmark = pytest.mark.integration


def test_attach_by_address_with_its_token_file_then_run_a_job_on_it(ray_head, job_prefix, tmp_path):
    ctx = context_for(StandInTI(dag_id=f"{job_prefix}_addr"))
    attach = AttachRayClusterOperator(
        task_id="attach", address=ray_head.dashboard_url, token_file=ray_head.token_file
    )
    handle = attach.execute(ctx)
    assert handle["owned"] is False and handle["dashboard_url"] == ray_head.dashboard_url
    assert "token" not in {k for k, v in handle.items() if v and k != "auth_token_file"}
    submit = SubmitRayJobOperator(
        task_id="submit", cluster=handle, entrypoint="python -c 'print(7)'", poll_interval=0.3
    )
    assert submit.execute(ctx)["status"] == "SUCCEEDED"

    wrong = tmp_path / "wrong_token"
    wrong.write_text("not-the-token")
    with pytest.raises(RayClusterNotReadyError, match="does not answer"):
        AttachRayClusterOperator(task_id="a", address=ray_head.dashboard_url, token_file=str(wrong)).execute(
            ctx
        )
    with pytest.raises(RayInvalidInputError, match="token_file"):
        AttachRayClusterOperator(task_id="a", address=ray_head.dashboard_url, token_file="/no/such").execute(
            ctx
        )
    with pytest.raises(RayInvalidInputError, match=r"cluster_name .* or address"):
        AttachRayClusterOperator(task_id="a", cluster_name="x", address=ray_head.dashboard_url)

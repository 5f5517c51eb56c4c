"""The "Ray job" extra link: a browser's address, the ephemeral cluster said, no XCom lookup before submit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_ray_provider.clusters import RayClusterHandle
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.client import JobClient
from airflow_ray_provider.launch import ClusterTarget
from airflow_ray_provider.operators.base import RayJobLink, push_job_url

pytestmark = pytest.mark.unit

SID = "airflow-d-evaluate-manual-abc"


def _link(address: str, **handle: Any) -> str | None:
    if not handle:
        return ClusterTarget(client=JobClient(address)).link(SID)
    cluster = RayClusterHandle(backend="local", dashboard_url=address, **handle)
    return ClusterTarget(handle=cluster).link(SID)


def test_link_of_a_standing_cluster_is_the_job_page() -> None:
    assert _link("http://localhost:8265/") == f"http://localhost:8265/#/jobs/{SID}"
    assert _link("http://localhost:8265", name="prod", owned=False) == f"http://localhost:8265/#/jobs/{SID}"


def test_link_of_a_cluster_the_run_deletes_says_so() -> None:
    url = _link("http://127.0.0.1:40123", name="ray-d-abc", owned=True)
    assert url == f"http://127.0.0.1:40123/?ray_cluster=ray-d-abc&ephemeral=deleted-when-done#/jobs/{SID}"


def test_task_that_never_submitted_answers_empty_without_reading_xcom() -> None:
    """The task runner asks every task for its links at its end; reading the missing XCom logged
    ``XCom not found ... key='ray_job_url'`` for a task that failed before submitting. Outside a task
    run, any XCom read would raise here, so an answer proves none was attempted."""
    link = RayJobLink()
    assert link.get_link(SimpleNamespace(), ti_key=None) == ""  # type: ignore[arg-type]


def test_task_that_pushed_answers_its_url() -> None:
    operator, pushed = SimpleNamespace(), {}
    push_job_url(operator, SimpleNamespace(xcom_push=lambda key, value: pushed.update({key: value})), "u")
    assert pushed == {"ray_job_url": "u"}
    assert RayJobLink().get_link(operator, ti_key=None) == "u"  # type: ignore[arg-type]


def test_connection_dashboard_url_is_the_browser_address() -> None:
    from airflow.sdk import Connection

    from airflow_ray_provider.hooks.ray_job import RayJobHook, connection_link_url
    from tests.fixtures.ray_job import drop_connection, set_connection

    extra = {"dashboard_url": "http://localhost:8265/"}
    set_connection("c", host="http://ray-head:8265", extra=extra)
    try:
        hook = RayJobHook("c")
        address, link = hook.client.address, connection_link_url(hook.connection)
    finally:
        drop_connection("c")
    assert (address, link) == ("http://ray-head:8265", "http://localhost:8265")
    plain = Connection(conn_id="c", conn_type="ray", host="http://h:8265")
    assert connection_link_url(plain) == "http://h:8265"
    bad = Connection(conn_id="c", conn_type="ray", host="http://h:8265", extra='{"dashboard_url": "h:1"}')
    with pytest.raises(RayInvalidInputError, match=r"dashboard_url.*http://"):
        connection_link_url(bad)

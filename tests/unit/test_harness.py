"""The harness itself: the Ray head answers with auth, Airflow's DB is migrated, the provider registers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


@pytest.mark.integration
def test_ray_head_requires_and_accepts_token(ray_head, ray_head_token):
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(f"{ray_head.dashboard_url}/api/version", timeout=5)
    assert excinfo.value.code == 401
    request = urllib.request.Request(
        f"{ray_head.dashboard_url}/api/version",
        headers={"Authorization": f"Bearer {ray_head_token}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.load(response)["ray_version"].startswith("2.")


@pytest.mark.integration
def test_airflow_db_is_migrated(airflow_db):
    import os

    from airflow import settings
    from sqlalchemy import inspect, text

    assert airflow_db == os.environ["AIRFLOW_HOME"]
    assert settings.engine.url.database.startswith(airflow_db)  # the temporary home, never the user's
    tables = set(inspect(settings.engine).get_table_names())
    assert {"dag_run", "task_instance", "xcom", "connection", "alembic_version"} <= tables
    with settings.engine.connect() as connection:
        revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert revision


@pytest.mark.unit
def test_provider_is_registered_with_airflow():
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-ray-provider" in providers
    info = providers["airflow-ray-provider"].data
    assert {c["connection-type"] for c in info["connection-types"]} == {"ray", "kuberay"}

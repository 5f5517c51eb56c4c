"""A manifest path renders by absolute path and relative to the DAG's template search path."""

from __future__ import annotations

from datetime import datetime

import pytest

MANIFEST = "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: from-file\n"


@pytest.mark.unit
def test_manifest_path_renders_absolute_and_relative(tmp_path):
    from airflow.sdk import DAG

    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    (tmp_path / "cluster.yaml").write_text(MANIFEST)
    with DAG("paths", schedule=None, start_date=datetime(2024, 1, 1), template_searchpath=[str(tmp_path)]):
        absolute = CreateRayClusterOperator(
            task_id="a", cluster_conn_id="k", manifest=str(tmp_path / "cluster.yaml")
        )
        relative = CreateRayClusterOperator(task_id="r", cluster_conn_id="k", manifest="cluster.yaml")
        missing = CreateRayClusterOperator(
            task_id="m", cluster_conn_id="k", manifest=str(tmp_path / "no.yaml")
        )
    for op in (absolute, relative):
        op.render_template_fields({})
        assert op.manifest == MANIFEST.rstrip("\n") or op.manifest == MANIFEST
    import jinja2

    with pytest.raises(jinja2.TemplateNotFound):
        missing.render_template_fields({})


@pytest.mark.unit
def test_a_relative_manifest_path_is_not_looked_up_from_the_root(tmp_path):
    """``tmp/<name>`` missing from the search path is not ``/tmp/<name>``, even where that file exists."""
    import tempfile

    import jinja2
    from airflow.sdk import DAG

    from airflow_ray_provider.operators.ray_cluster import CreateRayClusterOperator

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp") as outside:
        outside.write(MANIFEST)
        outside.flush()
        with DAG("rel", schedule=None, start_date=datetime(2024, 1, 1), template_searchpath=[str(tmp_path)]):
            op = CreateRayClusterOperator(task_id="r", cluster_conn_id="k", manifest=outside.name.lstrip("/"))
        with pytest.raises(jinja2.TemplateNotFound):
            op.render_template_fields({})

"""The evaluation pipeline passes Ray Data only named parameters (no ``RayDeprecationWarning`` from here)."""

from __future__ import annotations

import inspect

import pytest

from airflow_ray_provider.workloads.evaluation.config import EvalConfig

pytestmark = pytest.mark.unit


def test_the_read_stage_uses_only_named_map_batches_parameters() -> None:
    """``max_retries=-1`` went to the deprecated ``**ray_remote_args`` (removed in Ray 2.64)."""
    import ray.data

    named = set(inspect.signature(ray.data.Dataset.map_batches).parameters) - {"ray_remote_args"}
    from airflow_ray_provider.workloads.evaluation.pipeline import read_stage_options

    cfg = EvalConfig.from_dict(
        {
            "data_uri": "/d",
            "columns": {"label": "y", "group": "request_id"},
            "models": {"champion": "/m/a.joblib", "challenger": "/m/b.joblib"},
            "output_uri": "/o",
        }
    )
    options = read_stage_options(cfg)
    assert set(options) <= named, sorted(set(options) - named)

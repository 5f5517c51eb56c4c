"""Zone-training config parsing: defaults, and a clear error for every malformed value."""

from __future__ import annotations

import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.zone_training.config import parse_config

pytestmark = pytest.mark.unit

BASE = {
    "application": "app",
    "data_uri": "/data",
    "zone_column": "zone",
    "label_column": "y",
    "output_uri": "/out",
}


def test_minimal_config_gets_documented_defaults() -> None:
    cfg = parse_config(dict(BASE))
    assert (cfg.trainer, cfg.num_cpus, cfg.threads, cfg.max_retries, cfg.zone_retries) == (
        "ridge",
        1.0,
        1,
        3,
        0,
    )
    assert cfg.zone_timeout_s is None and cfg.max_failed_fraction == 0.0 and cfg.feature_columns is None
    assert cfg.batching.target_task_seconds == 0.25 and cfg.batching.max_in_flight is None


def test_full_config_is_kept() -> None:
    cfg = parse_config(
        {
            **BASE,
            "feature_columns": ["a", "b"],
            "trainer": "hist_gradient_boosting",
            "trainer_kwargs": {"max_iter": 5},
            "num_cpus": 2,
            "zone_timeout_s": 3,
            "max_failed_fraction": 0.1,
            "batching": {"target_task_seconds": 0.5, "max_in_flight": 8, "max_zones_per_task": 1},
            "run_info": {"dag_id": "d"},
        }
    )
    assert cfg.threads == 2 and cfg.feature_columns == ["a", "b"] and cfg.trainer_kwargs == {"max_iter": 5}
    assert cfg.batching.max_in_flight == 8 and cfg.batching.max_zones_per_task == 1
    assert cfg.zone_timeout_s == 3.0 and cfg.run_info == {"dag_id": "d"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"zone_column": None}, "'zone_column' is required"),
        ({"application": ""}, "'application' must be a non-empty string"),
        ({"trainer_kwarg": {}}, "unknown config key(s) ['trainer_kwarg']"),
        ({"num_cpus": 0}, "'num_cpus' must be > 0.0"),
        ({"num_cpus": "2"}, "'num_cpus' must be a number"),
        ({"max_failed_fraction": 1.5}, "'max_failed_fraction' must be >= 0.0 and <= 1.0"),
        ({"max_retries": -1}, "'max_retries' must be an integer >= 0"),
        ({"zone_timeout_s": 0}, "'zone_timeout_s' must be > 0.0"),
        ({"feature_columns": ["y"]}, "must not contain the zone or label column"),
        ({"feature_columns": "a,b"}, "'feature_columns' must be a non-empty list"),
        ({"trainer_kwargs": [1]}, "'trainer_kwargs' must be a mapping"),
        ({"batching": {"target": 1}}, "unknown 'batching' key(s) ['target']"),
        ({"batching": {"max_in_flight": 0}}, "'batching.max_in_flight' must be an integer >= 1"),
        ({"batching": {"min_task_seconds": 1.0}}, "must not exceed 'batching.target_task_seconds'"),
    ],
)
def test_malformed_config_names_the_problem(change: dict, message: str) -> None:
    raw = {**BASE, **change}
    if change.get("zone_column", "") is None:
        del raw["zone_column"]
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert message in str(err.value)


def test_non_mapping_config_is_rejected() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_config(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_run_main_returns_the_status_and_frees_cycles_before_exit() -> None:
    import gc
    import weakref

    from airflow_ray_provider.workloads.common.cli import run_main

    class Holder:
        pass

    refs = []

    def main() -> int:
        holder = Holder()
        holder.self = holder  # a cycle, like an exception traceback holding the frame that read data
        refs.append(weakref.ref(holder))
        return 2

    was_enabled = gc.isenabled()
    gc.disable()  # only run_main's own collection can free it
    try:
        assert run_main(main) == 2
        assert refs[0]() is None
    finally:
        if was_enabled:
            gc.enable()

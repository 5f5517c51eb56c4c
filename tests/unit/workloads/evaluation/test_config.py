"""Evaluation config validation: every malformed config fails with a message naming the key and the fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.evaluation.config import EvalConfig

pytestmark = pytest.mark.unit


def _raw(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "data_uri": "s3://logs/2026-11-29/",
        "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"], "features": ["f0", "f1"]},
        "models": {
            "champion": {"uri": "/m/champ.joblib"},
            "challenger": {"factory": "pkg.mod:build", "kwargs": {"a": 1}},
        },
        "output_uri": "/tmp/out",
    }
    raw.update(overrides)
    return raw


def test_defaults_and_parsing() -> None:
    cfg = EvalConfig.from_dict(_raw(scoring={"concurrency": [1, 4], "num_gpus": 1, "batch_size": 1024}))
    assert cfg.model_names == ("champion", "challenger")
    assert cfg.metrics == ("accuracy", "roc_auc", "log_loss", "calibration", "ndcg")
    assert cfg.ndcg_k == (5, 10)
    assert cfg.scoring.concurrency == (1, 4)
    assert cfg.scoring.num_gpus == 1.0
    assert cfg.models[1].loader == "factory" and cfg.models[1].kwargs == {"a": 1}
    assert cfg.bootstrap.samples == 200 and cfg.bootstrap.confidence == 0.95


def test_model_shorthand_strings() -> None:
    cfg = EvalConfig.from_dict(_raw(models={"champion": "/m/a.pkl", "challenger": "pkg.mod:build"}))
    assert cfg.models[0].uri == "/m/a.pkl"
    assert cfg.models[1].factory == "pkg.mod:build"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"data_uri": ""}, "data_uri"),
        ({"colums": {}}, "unknown config key(s) ['colums']"),
        ({"columns": {"group": "g"}}, "'columns.label' is required"),
        ({"columns": {"label": "y", "slices": "zone", "features": [1]}}, "columns.features"),
        ({"models": {"champion": {"uri": "a.joblib"}}}, "at least two models"),
        ({"models": {"champion": {}, "challenger": {"uri": "b"}}}, "exactly one of 'uri'"),
        ({"models": {"champion": {"factory": "nocolon"}, "challenger": {"uri": "b"}}}, "module:function"),
        ({"baseline": "prod"}, "baseline 'prod' is not one of the models"),
        ({"metrics": ["auc"]}, "unknown metric(s) ['auc']"),
        ({"ndcg_k": [0]}, "ndcg_k"),
        ({"threshold": 1.5}, "'threshold' must be >= 0.0 and <= 1.0"),
        ({"bootstrap": {"samples": -1}}, "bootstrap.samples"),
        ({"bootstrap": {"confidence": 2}}, "confidence"),
        ({"scoring": {"concurrency": 0}}, "scoring.concurrency"),
        ({"scoring": {"concurrency": [3, 1]}}, "scoring.concurrency"),
        ({"scoring": {"gpus": 1}}, "unknown 'scoring' key(s) ['gpus']"),
        ({"write_predictions": "yes"}, "'write_predictions' must be true or false"),
        ({"columns": {"label": "y", "group": "g", "features": ["y"]}}, "listed as features and as label"),
    ],
)
def test_malformed_configs_name_the_problem(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        EvalConfig.from_dict(_raw(**overrides))
    assert needle in str(info.value)


def test_ndcg_needs_a_group_column() -> None:
    with pytest.raises(ConfigError, match=r"set columns\.group"):
        EvalConfig.from_dict(_raw(columns={"label": "clicked"}))
    cfg = EvalConfig.from_dict(_raw(columns={"label": "clicked"}, metrics=["roc_auc", "log_loss"]))
    assert cfg.columns.group is None


def test_missing_required_keys() -> None:
    for key in ("data_uri", "columns", "models", "output_uri"):
        raw = _raw()
        del raw[key]
        with pytest.raises(ConfigError, match=f"'{key}' is required"):
            EvalConfig.from_dict(raw)


def test_yaml_and_json_files_load(tmp_path: Any) -> None:
    from airflow_ray_provider.workloads.common.cli import load_config

    (tmp_path / "c.json").write_text(json.dumps(_raw()))
    (tmp_path / "c.yaml").write_text(
        "data_uri: /d\noutput_uri: /o\ncolumns: {label: y, group: g}\n"
        "models:\n  champion: {uri: a.joblib}\n  challenger: {uri: b.joblib}\n"
    )
    assert EvalConfig.from_dict(load_config(path=str(tmp_path / "c.json"))).data_uri.startswith("s3://")
    assert EvalConfig.from_dict(load_config(path=str(tmp_path / "c.yaml"))).columns.group == "g"

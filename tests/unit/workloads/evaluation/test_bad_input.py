"""Bad input fails in preflight (before Ray starts) with a clear message, and leaves no artifact."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import joblib
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError, DataError
from airflow_ray_provider.workloads.evaluation.run import run_evaluation
from tests.fixtures.evaluation import ScoreOnly

pytestmark = pytest.mark.unit


def _assert_fails(cfg: dict[str, Any], exc_type: type[Exception], *needles: str) -> None:
    with pytest.raises(exc_type) as info:
        run_evaluation(cfg)
    for needle in needles:
        assert needle in str(info.value)
    assert not os.path.exists(cfg["output_uri"]), "nothing may be written on bad input"


def test_missing_columns(eval_config: Callable[..., dict[str, Any]]) -> None:
    cfg = eval_config(columns={"label": "clicked", "group": "request_id", "slices": ["region"]})
    _assert_fails(cfg, DataError, "columns.slices", "['region']", "available columns")


def test_empty_dataset(eval_config: Callable[..., dict[str, Any]], tmp_path: Any) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    table = pa.table(
        {
            "request_id": pa.array([], pa.int64()),
            "zone": pa.array([], pa.string()),
            "clicked": pa.array([], pa.int8()),
        }
    )
    pq.write_table(table, empty / "part-0.parquet")
    cfg = eval_config(
        data_uri=str(empty), columns={"label": "clicked", "group": "request_id", "features": ["zone"]}
    )
    _assert_fails(cfg, DataError, "has no rows")


def test_a_folder_without_parquet_files(eval_config: Callable[..., dict[str, Any]], tmp_path: Any) -> None:
    """It used to be reported as a missing label column."""
    (tmp_path / "empty_export").mkdir()
    _assert_fails(eval_config(data_uri=str(tmp_path / "empty_export")), DataError, "no Parquet files")


def test_an_output_uri_that_cannot_be_written_fails_before_any_work(
    eval_config: Callable[..., dict[str, Any]], tmp_path: Any
) -> None:
    """It used to fail only after the whole scoring pass (exit 1, work lost)."""
    from airflow_ray_provider.workloads.common.errors import ArtifactError
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.preflight import run_preflight

    (tmp_path / "a_file").write_text("not a folder")
    blocked = eval_config(output_uri=str(tmp_path / "a_file" / "eval"))
    with pytest.raises(ArtifactError, match=r"output_uri: .*a_file/eval.* is not writable"):
        run_preflight(EvalConfig.from_dict(blocked))
    fresh = eval_config(output_uri=str(tmp_path / "new" / "deeper" / "eval"))
    run_preflight(EvalConfig.from_dict(fresh))
    assert not (tmp_path / "new").exists()  # the probe left nothing behind, not even its folders


def test_missing_data_path(eval_config: Callable[..., dict[str, Any]], tmp_path: Any) -> None:
    _assert_fails(eval_config(data_uri=str(tmp_path / "nope")), DataError, "cannot open the evaluation data")


def test_unknown_model_uri(
    eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str], tmp_path: Any
) -> None:
    models = {
        "champion": {"uri": eval_sample["champion_uri"]},
        "challenger": {"uri": str(tmp_path / "gone.joblib")},
    }
    _assert_fails(
        eval_config(models=models), ConfigError, "model 'challenger'", "gone.joblib", "models.challenger.uri"
    )


def test_corrupt_model_file(
    eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str], tmp_path: Any
) -> None:
    bad = tmp_path / "bad.joblib"
    bad.write_bytes(b"not a model")
    models = {"champion": {"uri": eval_sample["champion_uri"]}, "challenger": {"uri": str(bad)}}
    _assert_fails(eval_config(models=models), ConfigError, "not a loadable joblib/pickle file")


def test_unimportable_factory(
    eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str]
) -> None:
    models = {
        "champion": {"uri": eval_sample["champion_uri"]},
        "challenger": {"factory": "no_such_pkg.mod:build"},
    }
    _assert_fails(eval_config(models=models), ConfigError, "cannot import factory")


def test_model_without_predict_proba(
    eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str], tmp_path: Any
) -> None:
    path = tmp_path / "ranker.joblib"
    joblib.dump(ScoreOnly([1.0] * 6), path)
    models = {"champion": {"uri": eval_sample["champion_uri"]}, "challenger": {"uri": str(path)}}
    _assert_fails(
        eval_config(models=models), ConfigError, "has no predict_proba", "log_loss", "['roc_auc', 'ndcg']"
    )


def test_feature_mismatch(eval_config: Callable[..., dict[str, Any]]) -> None:
    cfg = eval_config(columns={"label": "clicked", "group": "request_id", "features": ["f0", "f1"]})
    _assert_fails(cfg, DataError, "cannot score the data", "columns.features")


def test_labels_outside_zero_one(eval_config: Callable[..., dict[str, Any]], tmp_path: Any) -> None:
    rng = np.random.default_rng(0)
    data = tmp_path / "graded"
    data.mkdir()
    cols = {f"f{i}": rng.normal(size=50) for i in range(6)}
    pq.write_table(
        pa.table({"request_id": np.repeat(np.arange(5), 10), "clicked": rng.integers(0, 3, 50), **cols}),
        data / "p.parquet",
    )
    cfg = eval_config(data_uri=str(data), columns={"label": "clicked", "group": "request_id"})
    _assert_fails(cfg, DataError, "must hold 0/1", "binarise")


def test_cli_reports_one_clear_line_and_exit_code(eval_config: Callable[..., dict[str, Any]]) -> None:
    import json

    cfg = eval_config(columns={"label": "label_typo", "group": "request_id"})
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "evaluation failed: DataError: columns.label names column(s) ['label_typo']" in proc.stderr
    bad_json = subprocess.run(
        [sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", "{not json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad_json.returncode == 2 and "is not valid JSON" in bad_json.stderr


def test_a_ray_address_nothing_answers_at_fails_before_any_work(
    eval_config: Callable[..., dict[str, Any]], unreachable_ray_address: str
) -> None:
    """It used to hang in ``ray.init`` (retrying the GCS without end, deaf to SIGTERM) after preflight."""
    cfg = eval_config(ray_address=unreachable_ray_address)
    _assert_fails(cfg, ConfigError, f"ray_address {unreachable_ray_address!r}: nothing accepts connections")

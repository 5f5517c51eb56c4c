"""Checks of the whole input, before Ray or any scoring: footer statistics, group layout, score methods.

Each bad-input case fails in :func:`run_preflight` (which runs before any engine, Ray or scoring), names
the config field, and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from typing import Any

import joblib
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError, DataError
from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.preflight import run_preflight
from airflow_ray_provider.workloads.evaluation.run import run_evaluation

pytestmark = pytest.mark.unit

FEATURES = [f"f{i}" for i in range(3)]


def _refused(raw: dict[str, Any], exc_type: type[Exception], *needles: str) -> str:
    """The preflight refuses ``raw``; Ray was never started and nothing was written."""
    with pytest.raises(exc_type) as info:
        run_preflight(EvalConfig.from_dict(raw))
    for needle in needles:
        assert needle in str(info.value)
    assert not os.path.exists(raw["output_uri"]), "nothing may be written on bad input"
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
    return str(info.value)


def _log(folder: Any, parts: dict[str, dict[str, Any]], row_group_size: int = 1000) -> str:
    """Write one Parquet file per part (``name -> columns``) under ``folder``; returns the folder."""
    folder.mkdir(exist_ok=True)
    for name, columns in parts.items():
        pq.write_table(pa.table(columns), folder / f"{name}.parquet", row_group_size=row_group_size)
    return str(folder)


def _columns(groups: np.ndarray, rng: np.random.Generator, label: Any = None) -> dict[str, Any]:
    n = len(groups)
    out: dict[str, Any] = {"request_id": groups, "clicked": rng.integers(0, 2, n) if label is None else label}
    out.update({f: rng.normal(size=n) for f in FEATURES})
    return out


@pytest.fixture(scope="module")
def logistic(tmp_path_factory: pytest.TempPathFactory) -> str:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    path = tmp_path_factory.mktemp("models") / "logit.joblib"
    joblib.dump(LogisticRegression().fit(x, (x[:, 0] > 0).astype(int)), path)
    return str(path)


def _config(tmp_path: Any, data: str, model: str, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "data_uri": data,
        "columns": {"label": "clicked", "group": "request_id", "features": FEATURES},
        "models": {"champion": {"uri": model}, "challenger": {"uri": model}},
        "output_uri": str(tmp_path / "artifact"),
        "bootstrap": {"samples": 0},
        "engine": "local",
    }
    raw.update(changes)
    return raw


def test_label_nulls_beyond_the_sample_fail_from_the_footers(tmp_path: Any, logistic: str) -> None:
    rng = np.random.default_rng(1)
    label = pa.array([*([0, 1] * 2000), None, 1], pa.int8())  # the null is at row 4000, far past the sample
    data = _log(tmp_path / "d", {"p": _columns(np.repeat(np.arange(401), 10)[:4002], rng, label)})
    _refused(_config(tmp_path, data, logistic), DataError, "columns.label", "1 null values", "footer")


def test_a_label_out_of_range_beyond_the_sample_fails_from_the_footers(tmp_path: Any, logistic: str) -> None:
    rng = np.random.default_rng(2)
    label = np.concatenate([rng.integers(0, 2, 3000), [2], rng.integers(0, 2, 999)])
    data = _log(tmp_path / "d", {"p": _columns(np.repeat(np.arange(400), 10), rng, label)})
    _refused(_config(tmp_path, data, logistic), DataError, "columns.label", "ranges from 0 to 2", "binarise")


def test_a_group_split_across_two_files_in_the_middle_of_each_fails_before_scoring(
    tmp_path: Any, logistic: str
) -> None:
    """Used to be found only after every row was scored (16 s on Ray)."""
    rng = np.random.default_rng(3)
    first = np.repeat(np.arange(0, 100), 10)
    second = np.repeat(np.arange(100, 200), 10)
    second[500:505] = 50  # group 50 sits in the middle of the first file and of the second
    data = _log(tmp_path / "d", {"a": _columns(first, rng), "b": _columns(second, rng)}, row_group_size=250)
    message = _refused(_config(tmp_path, data, logistic), DataError, "columns.group", "not stored together")
    assert "a.parquet" in message and "b.parquet" in message


def test_a_group_split_inside_one_unsorted_file_fails_before_scoring(tmp_path: Any, logistic: str) -> None:
    rng = np.random.default_rng(4)
    groups = rng.permutation(np.repeat(rng.choice(10**9, 100, replace=False), 10).reshape(100, 10)).ravel()
    groups[[200, 700]] = groups[450]  # two stray rows of one group
    data = _log(tmp_path / "d", {"p": _columns(groups, rng)})
    _refused(_config(tmp_path, data, logistic), DataError, "columns.group", "not stored together")


@pytest.mark.parametrize("layout", ["sorted", "random ids", "interleaved sorted files", "split at file ends"])
def test_groups_stored_together_pass(tmp_path: Any, logistic: str, layout: str) -> None:
    """No false alarm where min/max overlap but no group is split (hash-partitioned, sorted files)."""
    rng = np.random.default_rng(5)
    if layout == "sorted":
        parts = {"a": np.repeat(np.arange(100), 10), "b": np.repeat(np.arange(100, 200), 10)}
    elif layout == "random ids":
        ids = rng.choice(10**9, 200, replace=False)
        parts = {"a": np.repeat(ids[:100], 10), "b": np.repeat(ids[100:], 10)}
    elif layout == "interleaved sorted files":
        parts = {"a": np.repeat(np.arange(0, 200, 2), 10), "b": np.repeat(np.arange(1, 200, 2), 10)}
    else:  # group 99 ends file a and starts file b: split only across block ends, which the merge completes
        parts = {"a": np.repeat(np.arange(100), 10), "b": np.repeat(np.arange(99, 199), 10)}
    data = _log(tmp_path / "d", {name: _columns(g, rng) for name, g in parts.items()}, row_group_size=300)
    pre = run_preflight(EvalConfig.from_dict(_config(tmp_path, data, logistic)))
    assert pre.rows == 2000


def _svc(tmp_path: Any) -> tuple[str, str, np.ndarray]:
    """A LinearSVC (no predict_proba) and a log it scores; returns model path, data folder, labels."""
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(6)
    x = rng.normal(size=(2000, 3))
    y = (x[:, 0] + 0.5 * rng.normal(size=2000) > 0).astype(np.int8)
    path = tmp_path / "svc.joblib"
    joblib.dump(LinearSVC().fit(x, y), path)
    cols = {
        "request_id": np.repeat(np.arange(200), 10),
        "clicked": y,
        **{f: x[:, i] for i, f in enumerate(FEATURES)},
    }
    return str(path), _log(tmp_path / "d", {"p": cols}), x


def test_a_linear_svc_asked_for_roc_auc_alone_is_refused_with_the_fix(tmp_path: Any) -> None:
    """It used to be scored on its 0/1 predict output, and the run succeeded."""
    svc, data, _ = _svc(tmp_path)
    raw = _config(
        tmp_path, data, svc, metrics=["roc_auc"], columns={"label": "clicked", "features": FEATURES}
    )
    message = _refused(raw, ConfigError, "hard 0/1 labels", "roc_auc", "models.champion.score_method")
    assert "decision_function" in message


def test_a_linear_svc_is_scored_with_decision_function_when_asked(tmp_path: Any) -> None:
    from sklearn.metrics import roc_auc_score

    svc, data, x = _svc(tmp_path)
    spec = {"uri": svc, "score_method": "decision_function"}
    raw = _config(
        tmp_path,
        data,
        svc,
        metrics=["roc_auc"],
        columns={"label": "clicked", "features": FEATURES},
        models={"champion": spec, "challenger": {"uri": svc, "score_method": "predict"}},
    )
    doc = run_evaluation(raw)
    model = joblib.load(svc)
    y = pq.read_table(data).column("clicked").to_numpy()
    assert doc["metrics"]["champion"]["roc_auc"] == pytest.approx(
        roc_auc_score(y, model.decision_function(x))
    )
    assert doc["metrics"]["challenger"]["roc_auc"] == pytest.approx(roc_auc_score(y, model.predict(x)))
    assert doc["models"]["champion"]["score_method"] == "decision_function"


@pytest.mark.parametrize(
    ("spec_change", "metrics", "needles"),
    [
        ({"score_method": "predict_probability"}, ["roc_auc"], ("models.champion.score_method", "one of")),
        ({"score_method": "decision_function"}, ["log_loss"], ("decision_function", "['log_loss']")),
    ],
)
def test_score_method_mistakes_are_refused(
    tmp_path: Any, logistic: str, spec_change: dict[str, str], metrics: list[str], needles: tuple[str, ...]
) -> None:
    rng = np.random.default_rng(7)
    data = _log(tmp_path / "d", {"p": _columns(np.repeat(np.arange(100), 10), rng)})
    raw = _config(tmp_path, data, logistic, metrics=metrics)
    raw["models"]["champion"] = {"uri": logistic, **spec_change}
    _refused(raw, ConfigError, *needles)


def test_a_model_fitted_on_a_data_frame_is_scored_with_its_feature_names(tmp_path: Any) -> None:
    """No "X does not have valid feature names" warning per block, and its own column order is used."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(8)
    frame = pd.DataFrame({f: rng.normal(size=3000) for f in reversed(FEATURES)})  # f2, f1, f0
    y = (frame["f0"] - frame["f2"] > 0).astype(np.int8).to_numpy()
    named = LogisticRegression().fit(frame, y)
    plain = LogisticRegression().fit(frame.to_numpy()[:, ::-1], y)  # the same model on f0, f1, f2
    joblib.dump(named, tmp_path / "named.joblib")
    joblib.dump(plain, tmp_path / "plain.joblib")
    cols = {
        "request_id": np.repeat(np.arange(300), 10),
        "clicked": y,
        **{f: frame[f].to_numpy() for f in FEATURES},
    }
    data = _log(tmp_path / "d", {"p": cols}, row_group_size=500)
    raw = _config(
        tmp_path,
        data,
        str(tmp_path / "named.joblib"),
        scoring={"block_rows": 500},
        models={
            "champion": {"uri": str(tmp_path / "plain.joblib")},
            "challenger": {"uri": str(tmp_path / "named.joblib")},
        },
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        doc = run_evaluation(raw)
    assert doc["metrics"]["challenger"]["roc_auc"] == pytest.approx(doc["metrics"]["champion"]["roc_auc"])
    assert doc["metrics"]["challenger"]["roc_auc"] > 0.9


def test_an_output_that_cannot_be_written_exits_2(tmp_path: Any, logistic: str) -> None:
    rng = np.random.default_rng(9)
    data = _log(tmp_path / "d", {"p": _columns(np.repeat(np.arange(100), 10), rng)})
    raw = _config(tmp_path, data, logistic, output_uri="/proc/x")
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_ray_provider.workloads.evaluate", "--config-json", json.dumps(raw)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "ArtifactError: output_uri: '/proc/x' is not writable" in proc.stderr


def test_the_templates_metric_table_is_the_workloads() -> None:
    from airflow_ray_provider.templates.champion_challenger.factory import produced_metrics
    from airflow_ray_provider.workloads.evaluation.names import metric_directions

    assert produced_metrics(["calibration", "ndcg"], [3]) == set(
        metric_directions(["calibration", "ndcg"], [3])
    )
    assert produced_metrics(["calibration"], [3]) == {
        "mean_predicted_ctr",
        "observed_ctr",
        "calibration_ratio",
        "calibration_error",
    }


def test_row_partials_come_from_one_constructor(tmp_path: Any, logistic: str) -> None:
    from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator, BlockPartial
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    rng = np.random.default_rng(10)
    data = _log(tmp_path / "d", {"p": _columns(np.repeat(np.arange(100), 10), rng)})
    cfg = EvalConfig.from_dict(_config(tmp_path, data, logistic))
    pre = run_preflight(cfg)
    partial = BlockEvaluator(cfg, pre.features, pre.has_proba, None, models=pre.loaded).evaluate(
        read_unit(pre.units[0], cfg.data_uri, pre.read_columns)
    )
    assert set(partial) == set(BlockPartial.__annotations__) - {"span"}  # span: set by the Ray actor
    assert partial["rows"] == 1000 and partial["complete_gkeys"] is not None

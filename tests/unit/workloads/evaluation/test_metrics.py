"""Exactness of the evaluation metrics: equal to scikit-learn, and independent of how the data is blocked.

The per-block code (``BlockEvaluator.evaluate``) and the driver merge (``Accumulator``) are the real ones;
only Ray's transport is left out (the integration tests run the same code through the Ray engine).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from sklearn.metrics import accuracy_score, log_loss, ndcg_score, roc_auc_score

from airflow_ray_provider.workloads.evaluation import bootstrap, metrics
from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator
from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.names import metric_directions
from airflow_ray_provider.workloads.samples.click_log import make_frame
from tests.fixtures.evaluation import in_memory_config

pytestmark = pytest.mark.unit
FEATURES = tuple(f"f{i}" for i in range(5))
KS = (1, 3, 10)


def _config(metrics_: list[str] | None = None, **models: dict[str, Any]) -> EvalConfig:
    rng = np.random.default_rng(5)
    models = models or {
        "champion": {
            "factory": "tests.fixtures.evaluation:make_rounded_model",
            "kwargs": {"weights": [0.3] * 5},
        },
        "challenger": {
            "factory": "tests.fixtures.evaluation:make_rounded_model",
            "kwargs": {"weights": list(rng.normal(0, 1, 5)), "decimals": 1},
        },
    }
    return in_memory_config(
        list(FEATURES), ["zone"], models,
        metrics=metrics_ or ["accuracy", "roc_auc", "log_loss", "calibration", "ndcg"],
        ndcg_k=list(KS), bootstrap={"samples": 40, "seed": 1, "buckets": 32},
    )  # fmt: skip


@pytest.fixture(scope="module")
def table() -> pa.Table:
    """3000 rows, groups of ~8 (some with no click), 4 zones; rounded scores give many ties."""
    return pa.table(make_frame(3000, zones=4, features=5, group_size=8, seed=11))


def _run(cfg: EvalConfig, blocks: list[pa.Table]) -> tuple[Any, Accumulator]:
    evaluator = BlockEvaluator(cfg, FEATURES, {"champion": True, "challenger": True}, None)
    acc = Accumulator(cfg, {"champion": True, "challenger": True})
    for block in blocks:
        acc.add(evaluator.evaluate(block))
    return acc.finalize(), acc


def _scores(cfg: EvalConfig, tbl: pa.Table, model: str) -> np.ndarray:
    evaluator = BlockEvaluator(cfg, FEATURES, {}, None)
    x = np.column_stack([tbl.column(f).to_numpy() for f in FEATURES])
    return evaluator.models[model].model.predict_proba(x)[:, 1]


def _sklearn_metrics(y: np.ndarray, p: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    out = {
        "accuracy": accuracy_score(y, (p >= 0.5).astype(int)),
        "roc_auc": roc_auc_score(y, p),
        "log_loss": log_loss(y, p, labels=[0, 1]),
        "mean_predicted_ctr": float(np.mean(p)),
        "observed_ctr": float(np.mean(y)),
        "calibration_ratio": float(np.sum(p) / np.sum(y)),
    }
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    ends = np.r_[starts[1:], len(y)]
    for k in KS:
        # sklearn refuses 1-document groups; with one row NDCG is 1 if it is relevant, else 0.
        per = [
            ndcg_score([y[a:b]], [p[a:b]], k=k) if b - a > 1 else float(y[a])
            for a, b in zip(starts, ends, strict=True)
        ]
        out[f"ndcg@{k}"] = float(np.mean(per))
    return out


def test_overall_and_per_slice_match_sklearn_with_ties(table: pa.Table) -> None:
    cfg = _config()
    result, _ = _run(cfg, [table])
    y = table.column("clicked").to_numpy()
    groups = table.column("request_id").to_numpy()
    zones = table.column("zone").to_numpy(zero_copy_only=False)
    for model in ("champion", "challenger"):
        p = _scores(cfg, table, model)
        assert len(np.unique(p)) < len(p) / 10, "the test needs many tied scores"
        expected = _sklearn_metrics(y, p, groups)
        got = result.overall[model]
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, abs=1e-9, rel=0), (model, name)
        for zone in np.unique(zones):
            mask = zones == zone
            want = _sklearn_metrics(y[mask], p[mask], groups[mask])
            row = next(r for r in result.slice_rows if r["slice"] == f"zone={zone}" and r["model"] == model)
            assert row["rows"] == int(mask.sum())
            for name, value in want.items():
                assert row[name] == pytest.approx(value, abs=1e-9, rel=0), (model, zone, name)


def test_groups_without_clicks_count_as_zero_ndcg(table: pa.Table) -> None:
    cfg = _config()
    result, _ = _run(cfg, [table])
    y = table.column("clicked").to_numpy()
    groups = table.column("request_id").to_numpy()
    clicked_groups = len(np.unique(groups[y == 1]))
    n_groups = len(np.unique(groups))
    assert clicked_groups < n_groups, "the test needs groups without clicks"
    assert result.groups == n_groups
    assert result.overall["champion"]["ndcg@10"] <= clicked_groups / n_groups + 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_boundaries_and_order_do_not_change_anything(table: pa.Table, seed: int) -> None:
    cfg = _config()
    whole, acc_whole = _run(cfg, [table])
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, table.num_rows), size=12, replace=False))
    bounds = np.r_[0, cuts, table.num_rows]
    blocks = [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    rng.shuffle(blocks)
    split, acc_split = _run(cfg, blocks)
    assert split.overall == whole.overall
    assert split.slice_rows == whole.slice_rows
    assert split.groups == whole.groups
    names = list(metric_directions(cfg.metrics, cfg.ndcg_k))
    d_whole = bootstrap.paired_deltas(cfg, acc_whole.buckets, acc_whole.hist, whole.overall, names)
    d_split = bootstrap.paired_deltas(cfg, acc_split.buckets, acc_split.hist, split.overall, names)
    assert d_split == d_whole


def test_probability_metrics_skipped_for_score_only_model(table: pa.Table) -> None:
    models = {
        "champion": {
            "factory": "tests.fixtures.evaluation:make_score_only_model",
            "kwargs": {"weights": [1.0] * 5},
        },
        "challenger": {
            "factory": "tests.fixtures.evaluation:make_score_only_model",
            "kwargs": {"weights": [0.5] * 5},
        },
    }
    cfg = _config(["roc_auc", "ndcg"], **models)
    evaluator = BlockEvaluator(cfg, FEATURES, {"champion": False, "challenger": False}, None)
    acc = Accumulator(cfg, {"champion": False, "challenger": False})
    acc.add(evaluator.evaluate(table))
    result = acc.finalize()
    x = np.column_stack([table.column(f).to_numpy() for f in FEATURES])
    y = table.column("clicked").to_numpy()
    assert result.overall["champion"]["roc_auc"] == pytest.approx(roc_auc_score(y, x.sum(axis=1)), abs=1e-9)
    assert "log_loss" not in result.overall["champion"]


def test_fixed_point_sums_are_exact_and_order_free() -> None:
    rng = np.random.default_rng(0)
    values = rng.random(100_000) * 30
    hi, lo = metrics.fixed_limbs(values, metrics.RANGE_BITS["sum_ll"])
    codes = np.zeros(len(values), dtype=np.int64)
    total = metrics.grouped_int_sum(codes, hi, 1), metrics.grouped_int_sum(codes, lo, 1)
    perm = rng.permutation(len(values))
    again = metrics.grouped_int_sum(codes, hi[perm], 1), metrics.grouped_int_sum(codes, lo[perm], 1)
    assert [int(a[0]) for a in total] == [int(a[0]) for a in again]
    value = metrics.fixed_to_float(total[0][0], total[1][0], metrics.RANGE_BITS["sum_ll"])
    assert value == pytest.approx(np.sum(values), rel=1e-15)


def test_auc_with_all_ties_and_single_class() -> None:
    assert metrics.auc_from_scores(np.array([0.5, 0.5]), np.array([0.5])) == 0.5
    assert metrics.auc_from_scores(np.array([0.5]), np.zeros(0)) is None
    y = np.array([0, 0, 1, 1, 0, 1, 1])
    s = np.array([0.1, 0.4, 0.4, 0.8, 0.8, 0.8, 0.2])
    assert metrics.auc_from_scores(s[y == 1], s[y == 0]) == pytest.approx(roc_auc_score(y, s), abs=1e-12)

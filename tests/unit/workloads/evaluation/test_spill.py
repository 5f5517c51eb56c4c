"""The spilled AUC path (above ``auc_memory_mb``) gives the in-memory path's bits and leaves nothing behind.

The per-block code and the driver merge are the real ones (as in ``test_metrics``), run with a budget of
0 (spill from the first block), a small one (spill part-way) and the default (in memory).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pytest

from airflow_ray_provider.workloads.common.errors import DataError
from airflow_ray_provider.workloads.evaluation import metrics, spill
from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator, EvalResult
from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator
from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.samples.click_log import make_frame
from tests.fixtures.evaluation import in_memory_config

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.unit
FEATURES = tuple(f"f{i}" for i in range(5))
PROBA = {"champion": True, "challenger": True, "constant": True}


def _config(slices: list[str], spill_dir: str, budget_mb: float) -> EvalConfig:
    model = "tests.fixtures.evaluation:make_rounded_model"
    models = {  # rounded scores: many ties; "constant": every score tied
        "champion": {"factory": model, "kwargs": {"weights": [0.3] * 5}},
        "challenger": {"factory": model, "kwargs": {"weights": [0.5, -1, 0.2, 0, 1], "decimals": 1}},
        "constant": {"factory": model, "kwargs": {"weights": [0.0] * 5}},
    }
    return in_memory_config(
        list(FEATURES), slices, models, metrics=["accuracy", "roc_auc", "log_loss", "ndcg"], ndcg_k=[3],
        bootstrap={"samples": 0}, auc_memory_mb=budget_mb, spill_dir=spill_dir,
    )  # fmt: skip


@pytest.fixture(scope="module")
def table() -> pa.Table:
    """4000 rows, 5 zones (two slice columns); zone z000 has no click, z001 only clicks."""
    frame = make_frame(4000, zones=5, features=5, group_size=8, seed=4)
    frame["clicked"] = np.where(frame["zone"] == "z000", 0, frame["clicked"]).astype(np.int8)
    frame["clicked"] = np.where(frame["zone"] == "z001", 1, frame["clicked"]).astype(np.int8)
    frame["region"] = np.where(np.isin(frame["zone"], ["z000", "z003"]), "north", "south")
    return pa.table(frame)


def _run(cfg: EvalConfig, blocks: list[pa.Table]) -> tuple[EvalResult, Accumulator]:
    evaluator = BlockEvaluator(cfg, FEATURES, PROBA, None)
    acc = Accumulator(cfg, PROBA)
    for block in blocks:
        acc.add(evaluator.evaluate(block))
    return acc.finalize(), acc


def _blocks(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(start, size) for start in range(0, table.num_rows, size)]


@pytest.mark.parametrize("slices", [["zone", "region"], []])
@pytest.mark.parametrize("budget_mb", [0.0, 0.05])
def test_spilled_aucs_equal_in_memory_bits(
    table: pa.Table, tmp_path: Path, slices: list[str], budget_mb: float
) -> None:
    memory, acc_memory = _run(_config(slices, str(tmp_path), 128.0), _blocks(table, 300))
    spilled, acc_spilled = _run(_config(slices, str(tmp_path), budget_mb), _blocks(table, 300))
    assert acc_memory.store is None
    assert acc_spilled.store is not None and acc_spilled.store.size == 8 * table.num_rows * 3 * max(
        1, len(slices)
    )
    assert all(len(s.edges) for s in acc_spilled.spilled.values()), "every model's edges from held scores"
    assert spilled.overall == memory.overall
    assert spilled.slice_rows == memory.slice_rows
    rows = {(r["slice"], r["model"]): r["roc_auc"] for r in spilled.slice_rows}
    if slices:
        assert rows[("zone=z000", "champion")] is None  # no positives
        assert rows[("zone=z001", "champion")] is None  # no negatives
        assert rows[("region=north", "constant")] == 0.5  # all tied
    assert spilled.overall["constant"]["roc_auc"] == 0.5


def test_spilled_scores_match_sorting_everything() -> None:
    """Several blocks, slice values missing from some blocks, ties across bucket edges, passes of 1 bucket."""
    rng = np.random.default_rng(7)
    n_values = 6
    pos: dict[int, list[np.ndarray]] = {g: [] for g in range(n_values)}
    neg: dict[int, list[np.ndarray]] = {g: [] for g in range(n_values)}
    with spill.SpillFile() as store:
        blocks = []
        for _ in range(9):
            n = int(rng.integers(1, 400))
            local = rng.permutation(n_values)[: int(rng.integers(1, n_values + 1))]  # block-local ids
            code = rng.integers(0, len(local), n)
            y = (rng.random(n) < 0.3).astype(np.int64)
            s = np.round(rng.random(n), 2)  # many ties
            key = code * 2 + y
            order = np.lexsort((s, key))
            blocks.append((local, np.bincount(key, minlength=2 * len(local)), s[order]))
            for g, label, score in zip(local[code], y, s, strict=True):
                (pos if label else neg)[int(g)].append(np.array([score]))
        edges = spill.bucket_edges(np.concatenate([b[2] for b in blocks]), buckets=8)
        scores = spill.SpilledScores(store, edges)
        for local, counts, sorted_scores in blocks:
            scores.add(local, counts, sorted_scores)
        assert len(scores._passes(1)) == len(edges) + 1
        for pass_scores in (1, 100, 10**9):
            per_value, total = scores.aucs(pass_scores, overall=True)
            assert total is not None
            want_all = metrics.auc_from_scores(
                np.concatenate([a for v in pos.values() for a in v]),
                np.concatenate([a for v in neg.values() for a in v]),
            )
            assert total.auc == want_all
            for g in range(n_values):
                p = np.concatenate(pos[g]) if pos[g] else np.zeros(0)
                q = np.concatenate(neg[g]) if neg[g] else np.zeros(0)
                got = per_value[g].auc if g in per_value else None
                assert got == metrics.auc_from_scores(p, q), g


def test_spill_file_is_never_named_and_is_closed_after_finalize(table: pa.Table, tmp_path: Path) -> None:
    cfg = _config(["zone"], str(tmp_path), 0.0)
    evaluator = BlockEvaluator(cfg, FEATURES, PROBA, None)
    acc = Accumulator(cfg, PROBA)
    for block in _blocks(table, 500):
        acc.add(evaluator.evaluate(block))
    assert acc.store is not None and acc.store.size > 0 and not acc.store.closed
    assert os.listdir(tmp_path) == []  # unnamed: nothing to leave behind, even if killed
    acc.finalize()
    assert acc.store.closed
    assert os.listdir(tmp_path) == []


def test_spill_file_is_closed_when_finalize_fails(table: pa.Table, tmp_path: Path) -> None:
    """A group split over two blocks that are not neighbours: finalize raises after spilling."""
    cfg = _config(["zone"], str(tmp_path), 0.0)
    evaluator = BlockEvaluator(cfg, FEATURES, PROBA, None)
    acc = Accumulator(cfg, PROBA)
    blocks = _blocks(table, 500)
    for block in [*blocks, blocks[0]]:
        acc.add(evaluator.evaluate(block))
    with pytest.raises(DataError, match="not stored together"):
        acc.finalize()
    assert acc.store is not None and acc.store.closed
    assert os.listdir(tmp_path) == []


def test_budget_is_a_config_key() -> None:
    cfg = _config([], "/nowhere", 16.0)
    assert cfg.auc_memory_mb == 16.0 and cfg.spill_dir == "/nowhere"
    assert EvalConfig.from_dict(_raw_minimal()).auc_memory_mb == 64.0


def _raw_minimal() -> dict[str, Any]:
    return {
        "data_uri": "d",
        "output_uri": "o",
        "columns": {"label": "clicked"},
        "metrics": ["roc_auc"],
        "models": {"champion": "m.joblib", "challenger": "n.joblib"},
    }

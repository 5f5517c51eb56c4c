"""Single-process reference for ``bench_evaluate``: pandas/numpy/scikit-learn, the same metrics.

Usage: ``python -m benchmarks.eval_baseline DATA CHAMPION CHALLENGER``; prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time

import joblib
import numpy as np
import pyarrow.parquet as pq
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

from airflow_ray_provider.workloads.evaluation.ranking import ndcg_per_group

KS = (5, 10)


def metrics_for(y: np.ndarray, p: np.ndarray, starts: np.ndarray) -> dict[str, float]:
    """The five metrics (NDCG@5/10 over the groups starting at ``starts``)."""
    out = {
        "accuracy": accuracy_score(y, p >= 0.5),
        "roc_auc": roc_auc_score(y, p),
        "log_loss": log_loss(y, p, labels=[0, 1]),
        "mean_predicted_ctr": float(p.mean()),
        "observed_ctr": float(y.mean()),
    }
    out.update({f"ndcg@{k}": float(v.mean()) for k, v in ndcg_per_group(starts, y, p, KS).items()})
    return out


def same_code(data: str, champion: str, challenger: str) -> dict[str, float]:
    """The workload's own per-block code and merge, run serially in this one process (no Ray)."""
    from airflow_ray_provider.workloads.evaluation import bootstrap, metrics
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.preflight import run_preflight
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    cfg = EvalConfig.from_dict(
        {
            "data_uri": data,
            "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"]},
            "models": {"champion": {"uri": champion}, "challenger": {"uri": challenger}},
            "output_uri": "unused",
        }
    )
    pre = run_preflight(cfg)
    evaluator = BlockEvaluator(cfg, pre.features, pre.has_proba, None)
    t0 = time.perf_counter()
    acc = Accumulator(cfg, pre.has_proba)
    for unit in pre.units:
        acc.add(evaluator.evaluate(read_unit(unit, cfg.data_uri, pre.read_columns)))
    t1 = time.perf_counter()
    result = acc.finalize()
    names = list(metrics.metric_directions(cfg.metrics, cfg.ndcg_k))
    bootstrap.paired_deltas(cfg, acc.buckets, acc.hist, result.overall, names)
    t2 = time.perf_counter()
    return {"rows": acc.rows, "blocks_s": t1 - t0, "rows_per_s": acc.rows / (t1 - t0), "finalize_s": t2 - t1}


def main(argv: list[str]) -> int:
    """Read, score, and compute the metrics overall and per zone."""
    if argv[0] == "--same-code":
        print(json.dumps(same_code(*argv[1:])))
        return 0
    data, *model_paths = argv
    models = [joblib.load(path) for path in model_paths]
    t0 = time.perf_counter()
    df = pq.read_table(data).to_pandas()
    features = [c for c in df.columns if c.startswith("f")]
    x = df[features].to_numpy(np.float64)
    y = df["clicked"].to_numpy()
    groups = df["request_id"].to_numpy()
    zone_rows = df.groupby("zone", sort=True).indices
    results = {}
    for i, model in enumerate(models):
        p = model.predict_proba(x)[:, 1]
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        per_zone = {}
        for zone, idx in zone_rows.items():
            zg = groups[idx]
            per_zone[zone] = metrics_for(y[idx], p[idx], np.flatnonzero(np.r_[True, zg[1:] != zg[:-1]]))
        results[f"model{i}"] = {"overall": metrics_for(y, p, starts), "zones": len(per_zone)}
    elapsed = time.perf_counter() - t0
    print(
        json.dumps({"rows": len(df), "seconds": elapsed, "rows_per_s": len(df) / elapsed, "results": results})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

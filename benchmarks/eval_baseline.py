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

from airflow_ray_provider.workloads.ranking import ndcg_per_group

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


def main(argv: list[str]) -> int:
    """Read, score, and compute the metrics overall and per zone."""
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

"""The script a user would write instead of this project: pandas + scikit-learn, one process.

Reads the same Parquet log, loads the two joblib models, scores every row, and writes a ``metrics.json``
with the same metrics as the workload (accuracy, ROC AUC, log loss, mean predicted / observed CTR,
NDCG@5/10 per request; overall and per zone). It imports nothing from this project.

Usage: ``python -m benchmarks.eval_plain_script DATA CHAMPION CHALLENGER OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import sys

import joblib
import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

KS = (5, 10)


def ndcg_per_request(df: pd.DataFrame, score: str, ideal_dcg: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """NDCG@k of every request (0 for a request without clicks), in ``request_id`` order."""
    ranked = df.sort_values(["request_id", score], ascending=[True, False], kind="stable")
    rank = ranked.groupby("request_id", sort=False).cumcount().to_numpy()
    gain = ranked["clicked"].to_numpy() / np.log2(rank + 2.0)
    out = {}
    for k in KS:
        dcg = pd.Series(np.where(rank < k, gain, 0.0)).groupby(ranked["request_id"].to_numpy()).sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            out[k] = np.nan_to_num(dcg.to_numpy() / ideal_dcg[k])
    return out


def ideal(df: pd.DataFrame) -> dict[int, np.ndarray]:
    """Ideal DCG@k of every request (clicks ranked first)."""
    best = df.sort_values(["request_id", "clicked"], ascending=[True, False], kind="stable")
    rank = best.groupby("request_id", sort=False).cumcount().to_numpy()
    gain = best["clicked"].to_numpy() / np.log2(rank + 2.0)
    keys = best["request_id"].to_numpy()
    return {k: pd.Series(np.where(rank < k, gain, 0.0)).groupby(keys).sum().to_numpy() for k in KS}


def metrics(y: np.ndarray, p: np.ndarray, ndcg: dict[int, np.ndarray]) -> dict[str, float]:
    """The metrics of one model on one set of rows (``ndcg``: the per-request values of those rows)."""
    out = {
        "rows": len(y),
        "accuracy": accuracy_score(y, p >= 0.5),
        "roc_auc": roc_auc_score(y, p),
        "log_loss": log_loss(y, p, labels=[0, 1]),
        "mean_predicted_ctr": float(p.mean()),
        "observed_ctr": float(y.mean()),
    }
    out.update({f"ndcg@{k}": float(v.mean()) for k, v in ndcg.items()})
    return out


def main(argv: list[str]) -> int:
    """Read, score, compute every metric overall and per zone, write ``OUT_DIR/metrics.json``."""
    data, champion, challenger, out_dir = argv
    models = {"champion": joblib.load(champion), "challenger": joblib.load(challenger)}
    df = pd.read_parquet(data)
    features = [c for c in df.columns if c.startswith("f")]
    x = df[features].to_numpy(np.float64)
    y = df["clicked"].to_numpy()
    best = ideal(df)
    request_zone = df.groupby("request_id", sort=True)["zone"].first().to_numpy()
    zones = df.groupby("zone", sort=True).indices
    doc: dict = {"rows": len(df), "metrics": {}, "slices": []}
    for name, model in models.items():
        df[name] = p = model.predict_proba(x)[:, 1]
        per_request = ndcg_per_request(df, name, best)
        doc["metrics"][name] = metrics(y, p, per_request)
        for zone, rows in zones.items():
            in_zone = request_zone == zone
            values = metrics(y[rows], p[rows], {k: v[in_zone] for k, v in per_request.items()})
            doc["slices"].append({"slice": f"zone={zone}", "model": name, **values})
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "metrics.json"), "w") as fh:
        json.dump(doc, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The plain script a user would write instead of the zone-training workload (``bench_zone_e2e``'s baseline).

Usage: ``python -m benchmarks.zone_baseline DATA OUT [--n-jobs 2]``; prints one JSON line.

pandas reads the Parquet file, ``groupby(zone)`` hands each zone's rows to
``joblib.Parallel(n_jobs=2)`` (loky, default batching), each zone fits a scikit-learn ``Ridge`` on
80 % of its rows (every fifth row held out, the same rows as the workload's built-in trainer) and
scores it on the rest (rmse, mae, r2). The outputs are what the workload writes: the models in one
bundle file (``{zone: pickled model}``), ``manifest.parquet`` (zone, status, rows, metrics,
artifact, artifact_key), ``summary.json`` and ``_SUCCESS``, each written atomically. No Ray, no
airflow_ray_provider imports: this is the script the project must beat.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from typing import Any


def fit_zone(zone: str, frame: Any, label: str, features: list[str]) -> tuple[str, int, bytes, dict, float]:
    """Fit and score one zone; return (zone, rows, pickled model, metrics, fit CPU seconds)."""
    import numpy as np
    from sklearn.linear_model import Ridge

    cpu = time.process_time()
    x = frame[features].to_numpy(dtype=np.float64)
    y = frame[label].to_numpy(dtype=np.float64)
    idx = np.arange(len(y))
    held = np.floor((idx + 1) * 0.2) > np.floor(idx * 0.2)
    model = Ridge().fit(x[~held], y[~held])
    err = model.predict(x[held]) - y[held]
    ss_tot = float(((y[held] - y[held].mean()) ** 2).sum())
    metrics = {
        "rmse": float(np.sqrt((err**2).mean())),
        "mae": float(np.abs(err).mean()),
        "r2": 1.0 - float((err**2).sum()) / ss_tot if ss_tot > 0 else None,
    }
    cpu = time.process_time() - cpu
    return zone, len(y), pickle.dumps(model, protocol=5), metrics, cpu


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` under a temporary name, then rename it into place."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Train every zone of DATA into OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args(argv)
    started = time.perf_counter()

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from joblib import Parallel, delayed

    frame = pd.read_parquet(args.data)
    features = [c for c in frame.columns if c not in ("zone", "y")]
    read_s = time.perf_counter() - started
    results = Parallel(n_jobs=args.n_jobs)(
        delayed(fit_zone)(str(zone), rows, "y", features) for zone, rows in frame.groupby("zone", sort=True)
    )
    fit_s = time.perf_counter() - started - read_s
    models_dir = os.path.join(args.out, "models")
    os.makedirs(models_dir, exist_ok=True)
    bundle = os.path.join(models_dir, "part-baseline.joblib")
    write_atomic(
        bundle, pickle.dumps({"format": "zone-model-bundle/1", "models": {r[0]: r[2] for r in results}})
    )
    manifest = pa.table(
        {
            "zone": [r[0] for r in results],
            "status": ["succeeded"] * len(results),
            "rows": [r[1] for r in results],
            "metrics": [json.dumps(r[3]) for r in results],
            "artifact": [bundle] * len(results),
            "artifact_key": [r[0] for r in results],
            "cpu_s": [r[4] for r in results],
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(manifest, sink)
    write_atomic(os.path.join(args.out, "manifest.parquet"), sink.getvalue().to_pybytes())
    summary = {"zones_total": len(results), "succeeded": len(results), "read_s": read_s, "fit_s": fit_s}
    write_atomic(os.path.join(args.out, "summary.json"), json.dumps(summary).encode())
    write_atomic(os.path.join(args.out, "_SUCCESS"), b"")
    summary["internal_wall_s"] = time.perf_counter() - started
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

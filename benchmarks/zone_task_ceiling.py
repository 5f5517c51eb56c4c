"""In-process ceiling of the zone task code (no Ray): fit CPU / process CPU, array vs DataFrame trainer.

Usage: ``python -m benchmarks.zone_task_ceiling DATA`` (a zone Parquet file, e.g. from
``python -m airflow_ray_provider.workloads.samples.zones``); prints one JSON line per variant.
``fit_share_of_cpu`` is the share of the task code's CPU spent inside the trainer: the utilisation
ceiling of any scheduler running this per-zone work, and a ratio of CPU times, so other users of a
shared machine distort it less than wall-clock utilisation. ``frame-ridge`` is a DataFrame trainer (the
old contract); its "fit" CPU includes its own DataFrame-to-NumPy conversion, so compare its
``process_cpu_s`` rather than its share.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
from typing import Any

from benchmarks import bench_zone_training as bench

VARIANTS = [("ridge", "bundled"), ("ridge", "per_zone"), ("frame-ridge", "per_zone")]


def frame_ridge(frame: Any, *, label_column: str, feature_columns: list[str], **kwargs: Any) -> Any:
    """The built-in Ridge as a DataFrame trainer (what every trainer was before array trainers)."""
    import numpy as np
    from sklearn.linear_model import Ridge

    from airflow_ray_provider.workloads.zone_training.trainers import fit_and_score

    x = frame[feature_columns].to_numpy(dtype=np.float64)
    return fit_and_score(Ridge(), x, frame[label_column].to_numpy(), feature_columns, "regression", 0.2)


def main(data: str) -> None:
    """Run every variant over ``data``."""
    from airflow_ray_provider.workloads.zone_training import worker

    bench._one_thread()
    worker._trainers["frame-ridge"] = frame_ridge
    plain_config = bench._config
    for trainer, mode in VARIANTS:
        bench._config = lambda *a, mode=mode: dataclasses.replace(plain_config(*a), artifacts=mode)  # type: ignore[misc]
        out = tempfile.mkdtemp(dir="/dev/shm")
        try:
            wall, fit, cpu = bench.bench_task_in_process(data, trainer, {}, out)
        finally:
            shutil.rmtree(out)
        figures = {"wall_s": round(wall, 3), "fit_cpu_s": round(fit, 3), "process_cpu_s": round(cpu, 3)}
        print(
            json.dumps(
                {"trainer": trainer, "artifacts": mode, **figures, "fit_share_of_cpu": round(fit / cpu, 3)}
            )
        )


if __name__ == "__main__":
    main(sys.argv[1])

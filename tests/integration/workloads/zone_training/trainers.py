"""A trainer for the zone-timeout tests: one that holds the GIL in a single C call.

(The other test trainers are in ``tests/fixtures/zone_training.py``.)
"""

from __future__ import annotations

from typing import Any

#: A regular expression whose backtracking on :data:`GIL_SUBJECT` takes minutes in one C call that never
#: releases the GIL (each extra ``a`` doubles it; 24 took 0.6 s on the 2-core development machine).
GIL_PATTERN = r"(a+)+$"
GIL_SUBJECT = "a" * 33 + "b"


def zone_gil_trainer(frame: Any, *, label_column: str, feature_columns: list[str], **kwargs: Any):
    """Ridge, except zones in ``gil_zones`` first run :data:`GIL_PATTERN` on :data:`GIL_SUBJECT`: no thread
    of the process runs Python meanwhile, so only a kill from outside ends it."""
    import re

    from airflow_ray_provider.workloads.zone_training.trainers import load_trainer

    if str(frame["zone"].iloc[0]) in kwargs.get("gil_zones", []):
        re.match(GIL_PATTERN, GIL_SUBJECT)
    return load_trainer("ridge")(frame, label_column=label_column, feature_columns=feature_columns)

"""Synthetic data for demos, templates, tests and benchmarks: a click log with two models, and zone data.

The names load lazily (PEP 562): ``python -m airflow_ray_provider.workloads.samples.click_log`` then runs
its module once, as ``__main__``, instead of after this package imported it already (which made
Python print a ``RuntimeWarning`` about the module found in ``sys.modules``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset, make_frame, make_models
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

__all__ = ["make_eval_dataset", "make_frame", "make_models", "make_zone_dataset"]
_HOME = {"make_eval_dataset": "click_log", "make_frame": "click_log", "make_models": "click_log"}
_HOME["make_zone_dataset"] = "zones"


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)

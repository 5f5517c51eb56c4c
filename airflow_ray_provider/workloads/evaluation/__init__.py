"""Champion-vs-challenger evaluation inside a Ray job: one streaming pass, exact metrics, paired CIs."""

from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.names import (
    DEFAULT_METRICS,
    KNOWN_METRICS,
    SCORE_METHODS,
    metric_directions,
)
from airflow_ray_provider.workloads.evaluation.packing import ModelGroup, Resources, pack_models
from airflow_ray_provider.workloads.evaluation.run import main, run_evaluation

__all__ = [
    "DEFAULT_METRICS",
    "KNOWN_METRICS",
    "SCORE_METHODS",
    "EvalConfig",
    "ModelGroup",
    "Resources",
    "main",
    "metric_directions",
    "pack_models",
    "run_evaluation",
]

"""Champion-vs-challenger evaluation inside a Ray job: one streaming pass, exact metrics, paired CIs."""

from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.run import main, run_evaluation

__all__ = ["EvalConfig", "main", "run_evaluation"]

"""Per-zone training inside a Ray job: one model per zone, thousands of zones, isolated failures."""

from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig, parse_config
from airflow_ray_provider.workloads.zone_training.loading import load_zone_model, load_zone_models
from airflow_ray_provider.workloads.zone_training.run import main, run_zone_training
from airflow_ray_provider.workloads.zone_training.trainers import array_trainer

__all__ = [
    "ZoneTrainingConfig",
    "array_trainer",
    "load_zone_model",
    "load_zone_models",
    "main",
    "parse_config",
    "run_zone_training",
]

"""Per-zone training inside a Ray job: one model per zone, thousands of zones, isolated failures."""

from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig, parse_config
from airflow_ray_provider.workloads.zone_training.run import main, run_zone_training

__all__ = ["ZoneTrainingConfig", "main", "parse_config", "run_zone_training"]

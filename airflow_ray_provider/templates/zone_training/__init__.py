"""Per-zone training: the DAG factory and the model-application type it maps over."""

from airflow_ray_provider.templates.zone_training.application import ZoneApplication
from airflow_ray_provider.templates.zone_training.factory import build_zone_training_dag

__all__ = ["ZoneApplication", "build_zone_training_dag"]

"""Deferrable triggers (imported by the triggerer by classpath): a run's Ray job, a cluster's readiness."""

from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

__all__ = ["RayClusterReadyTrigger", "RayJobTrigger"]

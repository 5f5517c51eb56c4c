"""Deferrable triggers, imported by the triggerer by classpath: Ray job and cluster readiness."""

from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

__all__ = ["RayClusterReadyTrigger", "RayJobTrigger"]

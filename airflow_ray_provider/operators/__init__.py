"""Airflow operators: Ray jobs, ephemeral Ray clusters and the metrics collectors."""

from airflow_ray_provider.operators.job_target import RayJobTargetMixin
from airflow_ray_provider.operators.metrics import CollectRayMetricsOperator, CollectZoneTrainingOperator
from airflow_ray_provider.operators.ray_cluster import (
    CreateRayClusterOperator,
    DeleteRayClusterOperator,
    RayClusterJanitorOperator,
)
from airflow_ray_provider.operators.ray_job import RayJobLink, SubmitRayJobOperator

__all__ = [
    "CollectRayMetricsOperator",
    "CollectZoneTrainingOperator",
    "CreateRayClusterOperator",
    "DeleteRayClusterOperator",
    "RayClusterJanitorOperator",
    "RayJobLink",
    "RayJobTargetMixin",
    "SubmitRayJobOperator",
]

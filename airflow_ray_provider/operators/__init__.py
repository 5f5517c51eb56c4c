"""Airflow operators: Ray jobs, ephemeral and standing clusters, KubeRay RayJobs."""

from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
from airflow_ray_provider.operators.ray_cluster import (
    AttachRayClusterOperator,
    CreateRayClusterOperator,
    DeleteRayClusterOperator,
    RayClusterJanitorOperator,
)
from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator, SubmitRayJobOperator

__all__ = [
    "AttachRayClusterOperator",
    "CreateRayClusterOperator",
    "DeleteRayClusterOperator",
    "EphemeralRayJobOperator",
    "KubeRayJobOperator",
    "RayClusterJanitorOperator",
    "SubmitRayJobOperator",
]

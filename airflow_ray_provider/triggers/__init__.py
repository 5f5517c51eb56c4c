"""Deferrable triggers (imported by the triggerer by classpath): Ray jobs, cluster readiness, RayJobs."""

from airflow_ray_provider.triggers.ephemeral_job import EphemeralClusterJobTrigger
from airflow_ray_provider.triggers.kuberay_job import KubeRayJobTrigger
from airflow_ray_provider.triggers.ray_cluster import RayClusterReadyTrigger
from airflow_ray_provider.triggers.ray_job import RayJobTrigger

__all__ = ["EphemeralClusterJobTrigger", "KubeRayJobTrigger", "RayClusterReadyTrigger", "RayJobTrigger"]

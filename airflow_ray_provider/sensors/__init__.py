"""Airflow sensors: wait for a Ray job something else submitted."""

from airflow_ray_provider.sensors.ray_job import RayJobSensor

__all__ = ["RayJobSensor"]

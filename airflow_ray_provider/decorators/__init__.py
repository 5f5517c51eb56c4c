"""TaskFlow decorators: ``@task.ray`` (registered through ``get_provider_info()["task-decorators"]``)."""

from airflow_ray_provider.decorators.ray_task import OneTaskRayTaskOperator, RayTaskOperator, ray_task

__all__ = ["OneTaskRayTaskOperator", "RayTaskOperator", "ray_task"]

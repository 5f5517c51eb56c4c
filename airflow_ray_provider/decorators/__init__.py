"""TaskFlow decorators: ``@task.ray`` (registered through ``get_provider_info()["task-decorators"]``)."""

from airflow_ray_provider.decorators.ray_task import ray_task

__all__ = ["ray_task"]

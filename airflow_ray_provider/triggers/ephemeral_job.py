"""``EphemeralClusterJobTrigger``: :class:`RayJobTrigger` for a job on its task's own ephemeral cluster.

It waits exactly as :class:`RayJobTrigger` does; the one difference is a user's kill of the deferred task:
after stopping the job it deletes the cluster too, so the one-task mode leaves nothing behind however
the task ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_ray_provider.clusters import RayClusterHandle
from airflow_ray_provider.hooks.cluster_backend import backend_for_handle
from airflow_ray_provider.triggers.ray_job import RayJobTrigger


def _delete_cluster(handle: RayClusterHandle, conn_id: str | None) -> bool:
    backend = backend_for_handle(handle, conn_id=conn_id)
    try:
        return backend.delete(handle, wait=False, timeout=60)
    finally:
        backend.close()


class EphemeralClusterJobTrigger(RayJobTrigger):
    """Wait for a Ray job on the task's own cluster; a user's kill stops the job and deletes the cluster.

    :param cluster_conn_id: the cluster connection the cluster was created through (``None``: local).
    :param kwargs: the arguments of :class:`RayJobTrigger` (``cluster`` is the ephemeral cluster's handle).
    """

    def __init__(self, *, cluster_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cluster_conn_id = cluster_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and every constructor argument (JSON-safe, no secrets)."""
        _, kwargs = super().serialize()
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            **kwargs,
            "cluster_conn_id": self.cluster_conn_id,
        }

    async def on_kill(self) -> None:
        """Stop the job (if asked to), then delete the task's cluster."""
        try:
            await super().on_kill()
        finally:
            if self.cluster is not None:
                handle = RayClusterHandle.from_dict(self.cluster)
                deleted = await asyncio.to_thread(_delete_cluster, handle, self.cluster_conn_id)
                self.log.info("Deleted the task's Ray cluster %s on kill (existed: %s)", handle.name, deleted)

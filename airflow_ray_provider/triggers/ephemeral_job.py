"""``EphemeralClusterJobTrigger``: kept so that triggers serialised by earlier releases still load.

The one-task operator now defers with a plain :class:`RayJobTrigger` told that it owns its cluster
(``owns_cluster=True``); a user's kill then stops the job and deletes the cluster as the cleanup table says.
"""

from __future__ import annotations

from typing import Any

from airflow_ray_provider.triggers.ray_job import RayJobTrigger


class EphemeralClusterJobTrigger(RayJobTrigger):
    """:class:`RayJobTrigger` with ``owns_cluster=True`` (deprecated name).

    :param kwargs: the arguments of :class:`RayJobTrigger`.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("owns_cluster", True)
        super().__init__(**kwargs)

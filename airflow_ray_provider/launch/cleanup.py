"""One cleanup vocabulary for every way of running a job: what a run leaves behind when it ends.

``cleanup`` is one of three words (dagster-ray's ``Lifecycle.cleanup``); :func:`actions_for` is the table
of docs/launch.md ("Cleanup"). "cluster" is only ever a cluster the run created itself; a KubeRay RayJob is
the job (stopping it deletes or suspends it). No Airflow or Ray imports.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from airflow_ray_provider.exceptions import RayInvalidInputError


class Cleanup(str, enum.Enum):
    """What a run cleans up when it ends (see the module's table)."""

    NEVER = "never"
    ON_EXCEPTION = "on_exception"
    ALWAYS = "always"

    @classmethod
    def parse(cls, value: str | Cleanup) -> Cleanup:
        """The member for ``value``; :class:`RayInvalidInputError` naming the field and the words."""
        try:
            return cls(value)
        except ValueError:
            words = ", ".join(repr(m.value) for m in cls)
            raise RayInvalidInputError(f"cleanup must be one of {words}, got {value!r}") from None


class Ending(str, enum.Enum):
    """How a run stopped waiting for its job."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    USER_KILL = "user_kill"
    WORKER_SIGTERM = "worker_sigterm"


@dataclass(frozen=True)
class CleanupActions:
    """What to do at one ending: stop the job if it still runs, delete the cluster the run created."""

    stop_job: bool
    delete_cluster: bool


def actions_for(cleanup: Cleanup, ending: Ending) -> CleanupActions:
    """The row of the table for ``cleanup`` at ``ending``."""
    if cleanup is Cleanup.NEVER:
        return CleanupActions(stop_job=False, delete_cluster=False)
    if ending in (Ending.SUCCEEDED, Ending.FAILED):
        return CleanupActions(stop_job=False, delete_cluster=True)
    if ending in (Ending.TIMED_OUT, Ending.USER_KILL) or cleanup is Cleanup.ALWAYS:
        return CleanupActions(stop_job=True, delete_cluster=True)
    return CleanupActions(stop_job=False, delete_cluster=False)  # ON_EXCEPTION at a worker's SIGTERM

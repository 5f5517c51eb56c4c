"""One cleanup vocabulary for every way of running a job: what a run leaves behind when it ends.

``cleanup`` takes one of three words (the shape of dagster-ray's ``Lifecycle.cleanup``):

================  ===========================  ===========================  ===========================
how the run       ``never``                    ``on_exception`` (default    ``always`` (default of the
ends                                           of a job on a given          one-task operator and of
                                               cluster, and of the CLI)     the KubeRay RayJob)
================  ===========================  ===========================  ===========================
job succeeded     job: done; cluster: kept     job: done; cluster: deleted  job: done; cluster: deleted
job failed        job: done; cluster: kept     job: done; cluster: deleted  job: done; cluster: deleted
timeout           job: left; cluster: kept     job: stopped; cl.: deleted   job: stopped; cl.: deleted
a user's kill     job: left; cluster: kept     job: stopped; cl.: deleted   job: stopped; cl.: deleted
worker SIGTERM    job: left; cluster: kept     job: left; cluster: kept     job: stopped; cl.: deleted
================  ===========================  ===========================  ===========================

"cluster" is only ever a cluster the run created itself: a standing cluster, a cluster handle from
another task or a Ray address is never deleted. A KubeRay RayJob is the job: "stopped" deletes it (or
suspends it, when asked), and KubeRay deletes its cluster; a RayJob that finished stays as the record
of its run, and KubeRay deletes its cluster after the job (``shutdownAfterJobFinishes``). Under
``on_exception`` a worker's SIGTERM (pod eviction, worker shutdown, deploy) is not the task's own
exception: the job and its cluster keep running and the retry re-attaches to both (same submission id,
same cluster name). ``never`` leaves everything for a person to look at; the janitor deletes owned
clusters after their expiry. No Airflow or Ray imports.
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
        """The member for ``value``.

        :raises RayInvalidInputError: naming the field and the accepted words.
        """
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
    """What to do at one ending.

    :param stop_job: stop the job if it still runs (a KubeRay RayJob: delete or suspend it).
    :param delete_cluster: delete the cluster the run created (never a cluster it did not create).
    """

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

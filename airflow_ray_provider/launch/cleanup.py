"""One cleanup vocabulary for every way of running a job: what a task leaves behind when it ends.

``cleanup`` takes one of three words (the shape of dagster-ray's ``Lifecycle.cleanup``):

================  ===========================  ===========================  ===========================
how the task      ``never``                    ``on_exception`` (default    ``always`` (default of the
ends                                           of a job on a given          one-task operator and of
                                               cluster)                     the KubeRay RayJob)
================  ===========================  ===========================  ===========================
job succeeded     job: done; cluster: kept     job: done; cluster: deleted  job: done; cluster: deleted
job failed        job: done; cluster: kept     job: done; cluster: deleted  job: done; cluster: deleted
timeout           job: left; cluster: kept     job: stopped; cl.: deleted   job: stopped; cl.: deleted
a user's kill     job: left; cluster: kept     job: stopped; cl.: deleted   job: stopped; cl.: deleted
worker SIGTERM    job: left; cluster: kept     job: left; cluster: kept     job: stopped; cl.: deleted
================  ===========================  ===========================  ===========================

"cluster" is only ever a cluster the task created itself: a standing cluster, a cluster handle from
another task or a Ray address is never deleted. Under ``on_exception`` a worker's SIGTERM (pod eviction,
worker shutdown, deploy) is not the task's own exception: the job and its cluster keep running and the
retry re-attaches to both (same submission id, same cluster name). ``never`` leaves everything for a
person to look at; the janitor deletes owned clusters after their expiry.

No Airflow or Ray imports: operators, triggers and the CLI all read this one table.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass

from airflow_ray_provider.exceptions import RayInvalidInputError


class Cleanup(str, enum.Enum):
    """What a task cleans up when it ends (see the module's table)."""

    NEVER = "never"
    ON_EXCEPTION = "on_exception"
    ALWAYS = "always"

    @classmethod
    def parse(cls, value: str | Cleanup, *, field_name: str = "cleanup") -> Cleanup:
        """The member for ``value``.

        :raises RayInvalidInputError: naming the field and the accepted words.
        """
        try:
            return cls(value)
        except ValueError:
            words = ", ".join(repr(m.value) for m in cls)
            raise RayInvalidInputError(f"{field_name} must be one of {words}, got {value!r}") from None


class Ending(str, enum.Enum):
    """How a task stopped waiting for its job."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    USER_KILL = "user_kill"
    WORKER_SIGTERM = "worker_sigterm"


@dataclass(frozen=True)
class CleanupActions:
    """What to do at one ending.

    :param stop_job: stop the job if it still runs (a KubeRay RayJob: delete or suspend it).
    :param delete_cluster: delete the cluster the task created (never a cluster it did not create).
    """

    stop_job: bool
    delete_cluster: bool


_GAVE_UP = frozenset({Ending.TIMED_OUT, Ending.USER_KILL})
_FINISHED = frozenset({Ending.SUCCEEDED, Ending.FAILED})


def actions_for(cleanup: Cleanup, ending: Ending) -> CleanupActions:
    """The row of the table for ``cleanup`` at ``ending``."""
    if cleanup is Cleanup.NEVER:
        return CleanupActions(stop_job=False, delete_cluster=False)
    if ending in _FINISHED:
        return CleanupActions(stop_job=False, delete_cluster=True)
    if ending in _GAVE_UP or cleanup is Cleanup.ALWAYS:
        return CleanupActions(stop_job=True, delete_cluster=True)
    return CleanupActions(stop_job=False, delete_cluster=False)  # ON_EXCEPTION at a worker's SIGTERM


def _deprecated(old: str, new: Cleanup) -> Cleanup:
    warnings.warn(
        f"{old} is deprecated: pass cleanup={new.value!r} (see docs/launch.md, 'Cleanup')",
        DeprecationWarning,
        stacklevel=4,
    )
    return new


def from_stop_on_kill(stop_on_kill: bool | None) -> Cleanup:
    """Map ``stop_on_kill``: ``None`` -> on_exception, ``True`` -> always, ``False`` -> never."""
    new = {None: Cleanup.ON_EXCEPTION, True: Cleanup.ALWAYS, False: Cleanup.NEVER}[stop_on_kill]
    return _deprecated(f"stop_on_kill={stop_on_kill!r}", new)


def from_on_kill(on_kill: str) -> Cleanup:
    """``KubeRayJobOperator(on_kill=...)``: ``delete`` -> always, ``none`` -> never (``suspend`` stays)."""
    new = {"delete": Cleanup.ALWAYS, "suspend": Cleanup.ALWAYS, "none": Cleanup.NEVER}.get(on_kill)
    if new is None:
        raise RayInvalidInputError(f"on_kill must be one of ('delete', 'suspend', 'none'), got {on_kill!r}")
    return _deprecated(f"on_kill={on_kill!r}", new)


def resolve_cleanup(
    cleanup: str | Cleanup | None, legacy: Cleanup | None, *, default: Cleanup, legacy_name: str
) -> Cleanup:
    """``cleanup`` if given, else the mapped legacy argument, else ``default``; both given is an error."""
    if cleanup is not None and legacy is not None:
        raise RayInvalidInputError(f"pass cleanup or the deprecated {legacy_name}, not both")
    if cleanup is not None:
        return Cleanup.parse(cleanup)
    return legacy if legacy is not None else default

"""Errors raised inside Ray jobs, and finding them again behind Ray's wrappers. No Airflow imports."""

from __future__ import annotations


class WorkloadError(Exception):
    """Base class for workload errors; the message says what to fix."""


class ConfigError(WorkloadError):
    """The job configuration is malformed or refers to something that does not exist."""


class DataError(WorkloadError):
    """The input data does not match the configuration (missing columns, empty, bad labels)."""


class ArtifactError(WorkloadError):
    """An artifact could not be read or written."""


def workload_error_from(exc: BaseException) -> WorkloadError | None:
    """The workload error behind ``exc``, if any, with its own class and message.

    An error raised in a Ray task or actor reaches the driver as a ``ray.exceptions.RayTaskError``
    whose ``cause`` is the original exception, unpickled by class: these classes live in this module,
    which every node imports. Ray Data wraps a map function's error in a ``UserCodeException`` first
    unless its ``DataContext.raise_original_map_exception`` is set (the evaluation pipeline sets it).
    This follows ``cause`` and then ``__cause__`` / ``__context__`` links until it finds one.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # a RayTaskError: look at what it carries
        if isinstance(cause, BaseException):
            current = cause
        elif isinstance(current, WorkloadError):
            return current
        else:
            current = current.__cause__ or current.__context__
    return None

"""Errors raised inside Ray jobs. No Airflow imports: this runs on the Ray cluster."""

from __future__ import annotations


class WorkloadError(Exception):
    """Base class for workload errors; the message says what to fix."""


class ConfigError(WorkloadError):
    """The job configuration is malformed or refers to something that does not exist."""


class DataError(WorkloadError):
    """The input data does not match the configuration (missing columns, empty, bad labels)."""


class ArtifactError(WorkloadError):
    """An artifact could not be read or written."""

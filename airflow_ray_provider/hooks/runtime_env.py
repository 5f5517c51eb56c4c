"""Validate a Ray runtime environment before submission: shapes first, then Ray's own parser."""

from __future__ import annotations

from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.submission import check_runtime_env


def validate_runtime_env(runtime_env: Any) -> dict[str, Any]:
    """Check a runtime_env before submitting; returns a copy.

    Checks shapes first (:func:`~airflow_ray_provider.jobs.submission.check_runtime_env`: clear
    messages, no Ray import), then lets Ray's ``RuntimeEnv`` (lazily imported) catch unknown plugins
    and bad field types.

    :raises RayInvalidInputError: naming the field to fix.
    """
    checked = check_runtime_env(runtime_env)
    try:
        from ray.runtime_env import RuntimeEnv

        RuntimeEnv(**checked)
    except Exception as exc:  # Ray raises TypeError/ValueError/others for bad fields
        raise RayInvalidInputError(f"runtime_env is invalid: {exc}") from exc
    return checked

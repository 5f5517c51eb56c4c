"""What both workloads share: errors, config checks, the Ray session rule, progress lines, the CLI runner.

``artifacts`` (atomic artifact I/O through ``pyarrow.fs``) is a module of its own here, imported as
``from airflow_ray_provider.workloads.common import artifacts``; the Airflow side reads artifacts with it.
"""

from airflow_ray_provider.workloads.common.autoscaler import autoscaling, scales_from_status
from airflow_ray_provider.workloads.common.cli import (
    ExitCode,
    build_parser,
    config_from_argv,
    exit_code_for,
    load_config,
    run_main,
)
from airflow_ray_provider.workloads.common.engine_choice import EngineChoice
from airflow_ray_provider.workloads.common.errors import (
    ArtifactError,
    ConfigError,
    DataError,
    WorkloadError,
    workload_error_from,
)
from airflow_ray_provider.workloads.common.progress import Progress
from airflow_ray_provider.workloads.common.ray_session import (
    RaySession,
    SessionMode,
    plan_session,
    ray_session,
)
from airflow_ray_provider.workloads.common.validation import ConfigSection

__all__ = [
    "ArtifactError",
    "ConfigError",
    "ConfigSection",
    "DataError",
    "EngineChoice",
    "ExitCode",
    "Progress",
    "RaySession",
    "SessionMode",
    "WorkloadError",
    "autoscaling",
    "build_parser",
    "config_from_argv",
    "exit_code_for",
    "load_config",
    "plan_session",
    "ray_session",
    "run_main",
    "scales_from_status",
    "workload_error_from",
]

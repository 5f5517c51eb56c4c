"""What both workloads share: artifact I/O, errors and the command-line runner."""

from airflow_ray_provider.workloads.common.cli import build_parser, config_from_argv, load_config, run_main
from airflow_ray_provider.workloads.common.errors import ArtifactError, ConfigError, DataError, WorkloadError

__all__ = [
    "ArtifactError",
    "ConfigError",
    "DataError",
    "WorkloadError",
    "build_parser",
    "config_from_argv",
    "load_config",
    "run_main",
]

"""What each job reserved, was allocated and cost: the usage record (docs/usage.md), made once from the
finished run by :func:`.observer.collect_usage` through any dashboard reader. Airflow-free and Ray-free.
"""

from airflow_ray_provider.launch.usage.observer import check_prices_on_cluster
from airflow_ray_provider.launch.usage.record import (
    HEAD_GROUP,
    SCHEMA,
    Prices,
    UsageOptions,
    check_against_cluster,
    parse_prices,
    usage_line,
)

__all__ = [
    "HEAD_GROUP",
    "SCHEMA",
    "Prices",
    "UsageOptions",
    "check_against_cluster",
    "check_prices_on_cluster",
    "parse_prices",
    "usage_line",
]

"""What each job reserved, was allocated and cost: the usage record (docs/usage.md).

Airflow-free and Ray-free: the record is made once, from the finished run (or one a timeout or a kill
ended), by :func:`collect_usage`, reading the cluster's dashboard through any :class:`DashboardReader`
(the Job API client is one). :func:`parse_prices` and :func:`check_prices_on_cluster` refuse bad prices
before anything is submitted; :func:`with_teardown` adds the cluster's teardown once it is gone.
"""

from airflow_ray_provider.launch.usage.dashboard import (
    DashboardReader,
    check_prices_on_cluster,
    collect_usage,
)
from airflow_ray_provider.launch.usage.prices import Prices, check_against_cluster, parse_prices
from airflow_ray_provider.launch.usage.record import (
    HEAD_GROUP,
    SCHEMA,
    UsageOptions,
    usage_line,
    with_teardown,
)

__all__ = [
    "HEAD_GROUP",
    "SCHEMA",
    "DashboardReader",
    "Prices",
    "UsageOptions",
    "check_against_cluster",
    "check_prices_on_cluster",
    "collect_usage",
    "parse_prices",
    "usage_line",
    "with_teardown",
]

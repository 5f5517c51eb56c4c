"""What each job reserved, was allocated and cost: the usage record (docs/usage.md).

Airflow-free: the operators call :func:`collect_usage` once the job has finished and put the record into XCom,
``usage.json`` and one log line; :func:`parse_prices` and
:func:`check_prices_on_cluster` refuse bad prices before anything is submitted.
"""

from airflow_ray_provider.launch.usage.collect import UsageRequest, check_prices_on_cluster, collect_usage
from airflow_ray_provider.launch.usage.prices import Prices, check_against_cluster, parse_prices
from airflow_ray_provider.launch.usage.record import HEAD_GROUP, SCHEMA, UsageRecord, with_teardown
from airflow_ray_provider.launch.usage.state import DashboardState, StateUnreadableError

__all__ = [
    "HEAD_GROUP",
    "SCHEMA",
    "DashboardState",
    "Prices",
    "StateUnreadableError",
    "UsageRecord",
    "UsageRequest",
    "check_against_cluster",
    "check_prices_on_cluster",
    "collect_usage",
    "parse_prices",
    "with_teardown",
]

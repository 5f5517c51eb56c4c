"""What each job reserved, was allocated, kept busy and cost: the usage record (docs/usage.md).

Airflow-free: the operators sample the job's process CPU while they wait (:func:`sampling` in the worker,
:func:`asampling` in a trigger), call
:func:`collect_usage` once the job has finished (``finish_job``) and put the record into XCom,
``usage.json`` and one log line; :func:`parse_prices` and
:func:`check_prices_on_cluster` refuse bad prices before anything is submitted.
"""

from airflow_ray_provider.launch.usage.busy import BusyLedger, BusySampler, asampling, sampling
from airflow_ray_provider.launch.usage.collect import UsageRequest, check_prices_on_cluster, collect_usage
from airflow_ray_provider.launch.usage.prices import Prices, check_against_cluster, parse_prices
from airflow_ray_provider.launch.usage.record import HEAD_GROUP, SCHEMA, UsageRecord, with_teardown
from airflow_ray_provider.launch.usage.state import DashboardState, StateUnreadableError

__all__ = [
    "HEAD_GROUP",
    "SCHEMA",
    "BusyLedger",
    "BusySampler",
    "DashboardState",
    "Prices",
    "StateUnreadableError",
    "UsageRecord",
    "UsageRequest",
    "asampling",
    "check_against_cluster",
    "check_prices_on_cluster",
    "collect_usage",
    "parse_prices",
    "sampling",
    "with_teardown",
]

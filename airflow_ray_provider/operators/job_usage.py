"""The usage record of a job operator's job: prices checked before submit, the record written after.

The figures come from :mod:`airflow_ray_provider.launch.usage` (Airflow-free); this module holds the
Airflow concerns only: where the prices come from (the operator's ``prices``, else the connection's
``prices`` extra), the ``usage`` XCom, ``usage.json`` beside the job's artifacts and the log line.
Reading the record never fails the job: a dashboard that does not answer gives a record that says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.launch.usage import (
    DashboardState,
    Prices,
    UsageRequest,
    check_prices_on_cluster,
    collect_usage,
    parse_prices,
)

if TYPE_CHECKING:
    from airflow_ray_provider.hooks.ray_job import RayJobHook

#: The XCom key of the usage record.
USAGE_XCOM_KEY = "usage"
#: The record's file name beside the job's artifacts.
USAGE_FILE = "usage.json"


def connection_prices(conn_id: str | None) -> Prices | None:
    """The ``prices`` extra of a connection (``None`` without a connection or without the extra).

    :raises RayInvalidInputError: for a malformed table, naming the connection.
    """
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson or {}
    except Exception:
        return None  # a missing connection is reported where it is used, not here
    return parse_prices(extra.get("prices"), source=f"connection {conn_id!r} extra 'prices'")


def entrypoint_request(
    cpus: float | None, gpus: float | None, memory: int | None, resources: dict[str, float] | None
) -> dict[str, float]:
    """The entrypoint's reservation in Ray's resource names (the operator's ``entrypoint_*`` arguments)."""
    out = {str(k): float(v) for k, v in (resources or {}).items()}
    for name, value in (("CPU", cpus), ("GPU", gpus), ("memory", memory)):
        if value:
            out[name] = float(value)
    return out


def dashboard_state(hook: RayJobHook) -> DashboardState:
    """The state API of the hook's cluster, with the hook's token, cookies and TLS settings."""
    config = hook.config
    return DashboardState(
        config.dashboard_url,
        headers=config.request_headers(),
        cookies=dict(config.cookies),
        verify=config.verify,
        timeout=min(config.request_timeout, 10.0),
    )


@dataclass
class JobUsage:
    """One task's usage bookkeeping.

    :param prices: the checked price table (operator argument, else connection extra), if any.
    :param mode: how the job runs (``ephemeral``, ``standing``, ``one_task``, ``task_ray``).
    :param own_cluster: the cluster is the task's own.
    :param cluster: the cluster's name.
    :param task_started: when the task began waiting for its own cluster.
    :param cluster_ready: when that cluster answered.
    """

    prices: Prices | None
    mode: str
    own_cluster: bool
    cluster: str
    task_started: float | None = None
    cluster_ready: float | None = None

    def check_before_submit(self, hook: RayJobHook, log: logging.Logger | Any) -> None:
        """Refuse prices for resources the cluster lacks (a dashboard that does not answer: a warning).

        :raises RayInvalidInputError: naming the field.
        """
        if self.prices is None:
            return
        why = check_prices_on_cluster(dashboard_state(hook), self.prices)
        if why:
            log.warning("Could not check the prices against the cluster's resources: %s", why)

    def record(
        self,
        hook: RayJobHook,
        submission_id: str,
        entrypoint: dict[str, float],
        *,
        ti: Any,
        artifact_uri: str | None,
        log: logging.Logger | Any,
    ) -> dict[str, Any] | None:
        """Collect the record, push it as the ``usage`` XCom, write ``usage.json``, log its line.

        :returns: the record's dict, ``None`` when even that failed (logged; the job's result stands).
        """
        try:
            request = UsageRequest(
                submission_id=submission_id, cluster=self.cluster, mode=self.mode,
                own_cluster=self.own_cluster, entrypoint=entrypoint, prices=self.prices,
                task_started=self.task_started, cluster_ready=self.cluster_ready,
            )  # fmt: skip
            record = collect_usage(dashboard_state(hook), request)
        except Exception as exc:  # the record is best effort: it never hides the job's outcome
            log.warning("Could not make the usage record of Ray job %s: %s", submission_id, exc)
            return None
        data = record.to_dict()
        log.info("Usage of Ray job %s: %s", submission_id, record.line())
        for what, why in sorted(record.not_available.items()):
            log.info("Usage record: %s not available: %s", what, why)
        if ti is not None:
            ti.xcom_push(key=USAGE_XCOM_KEY, value=data)
        if artifact_uri:
            write_usage_file(artifact_uri, data, log)
        return data


def write_usage_file(artifact_uri: str, data: dict[str, Any], log: logging.Logger | Any) -> str | None:
    """Write ``usage.json`` beside the job's artifacts (best effort); its URI."""
    from airflow_ray_provider.workloads.common import artifacts

    uri = artifacts.join(artifact_uri, USAGE_FILE)
    try:
        artifacts.write_json_atomic(uri, data)
    except Exception as exc:
        log.warning("Could not write %s: %s", uri, exc)
        return None
    log.info("Usage record written to %s", uri)
    return uri

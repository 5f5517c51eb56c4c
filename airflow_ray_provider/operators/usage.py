"""The usage record's Airflow side: where the prices come from, and where the record goes.

The record itself is made by the run (:mod:`airflow_ray_provider.launch.usage`, Airflow-free). Here:
the prices (the operator's ``prices``, else the connection's ``prices`` extra), the ``usage`` XCom,
``usage.json`` beside the job's artifacts, the log line, and what a report shows of a record. Reading
or writing the record never fails the job.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.launch.usage import (
    HEAD_GROUP,
    SCHEMA,
    Prices,
    check_against_cluster,
    parse_prices,
    usage_line,
)

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayClusterSpec

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


def check_prices_on_spec(prices: Prices, spec: RayClusterSpec) -> None:
    """Check a price table against the cluster a spec will make (a RayJob's cluster does not exist
    before submit): its head group ``headgroup`` and worker groups, each offering what its pod size and
    ``ray start`` params give.

    :raises RayInvalidInputError: for a price of a resource no group of the spec has.
    """
    import json

    groups: dict[str, set[str]] = {}
    sizes = [(g.name, g.cpu, g.gpu, g.ray_start_params) for g in spec.worker_groups]
    for name, cpu, gpu, params in [(HEAD_GROUP, spec.head.cpu, 0, spec.head.ray_start_params), *sizes]:
        has = groups.setdefault(name, {"memory_gib"})
        if str(params.get("num-cpus", cpu)).strip() not in ("0", "0.0"):
            has.add("CPU")
        if gpu or str(params.get("num-gpus", "0")).strip() not in ("0", "0.0"):
            has.add("GPU")
        try:
            custom = json.loads(params.get("resources", "{}").strip("'\""))
        except ValueError:
            custom = {}
        has.update(map(str, custom) if isinstance(custom, dict) else ())
    check_against_cluster(prices, groups)


#: Why a mode's record has no ``teardown_s`` (the one-task operator and a RayJob measure it).
TEARDOWN_NOTES = {
    "ephemeral": "the run's teardown task (delete_cluster) deletes the cluster after this record",
    "standing": "a standing cluster is never deleted by the provider",
    "one_task": "the task kept its cluster (cleanup), or deleting it failed",
}


def publish_usage(
    data: dict[str, Any], *, ti: Any, artifact_uri: str | None, log: logging.Logger | Any
) -> None:
    """Push a record as the ``usage`` XCom, write ``usage.json`` (best effort), log its line and what it
    lacks."""
    log.info("Usage of Ray job %s: %s", data.get("submission_id"), usage_line(data))
    for name, why in sorted((data.get("not_available") or {}).items()):
        log.info("Usage record: %s not available: %s", name, why)
    if ti is not None:
        ti.xcom_push(key=USAGE_XCOM_KEY, value=data)
    if artifact_uri:
        from airflow_ray_provider.workloads.common import artifacts

        uri = artifacts.join(artifact_uri, USAGE_FILE)
        try:
            artifacts.write_json_atomic(uri, data)
        except Exception as exc:
            log.warning("Could not write %s: %s", uri, exc)
            return
        log.info("Usage record written to %s", uri)


def read_usage(artifact_uri: str | None, log: logging.Logger | Any) -> dict[str, Any] | None:
    """The ``usage.json`` beside a job's artifacts, ``None`` when there is none (best effort)."""
    if not artifact_uri:
        return None
    from airflow_ray_provider.workloads.common import artifacts

    uri = artifacts.join(artifact_uri, USAGE_FILE)
    try:
        data = artifacts.read_json(uri) if artifacts.exists(uri) else None
    except Exception as exc:
        log.warning("Could not read the usage record %s: %s", uri, exc)
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def usage_summary(data: dict[str, Any] | None, *, function: str | None = None) -> dict[str, Any] | None:
    """What a report shows of a usage record: CPU-hours reserved and allocated, utilisation, cost, line.

    :param function: a task function whose allocated CPU-seconds to show as ``function_cpu_s`` (the
        zone job's training tasks), from the record's ``allocated_cpu_s_by_function``.
    """
    if not data:
        return None
    cost, missing = data.get("cost") or {}, data.get("not_available") or {}
    cpu_h = None if "allocated_cpu" in missing else (data.get("allocated") or {}).get("CPU")
    return {
        "function_cpu_s": (data.get("allocated_cpu_s_by_function") or {}).get(function) if function else None,
        "line": usage_line(data),
        "mode": data.get("mode"),
        "reserved_cpu_h": (data.get("reserved") or {}).get("CPU"),
        "allocated_cpu_h": cpu_h,
        "allocated_cpu_s": None if cpu_h is None else round(float(cpu_h) * 3600.0, 3),
        "utilisation": data.get("utilisation"),
        "cost": {"amount": cost.get("amount"), "currency": cost.get("currency")} if cost else None,
        "phases": data.get("phases"),
        "not_available": missing,
    }

"""What a job task hands on when its run ends: its usage record (XCom, ``usage.json``, a log line) and its
OpenLineage (what the job read and wrote, the ``rayJob`` run facet; the optional OpenLineage provider is
imported only when Airflow asks for lineage)."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch.usage import usage_line

EVALUATE_MODULE = "airflow_ray_provider.workloads.evaluate"
ZONE_MODULE = "airflow_ray_provider.workloads.zone_training"
#: The record's file name beside the job's artifacts.
USAGE_FILE = "usage.json"


@dataclass(frozen=True)
class JobIO:
    """The URIs a job reads and writes."""

    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    artifact_uri: str | None = None


def _after(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def workload_io(entrypoint: str | Sequence[str]) -> JobIO:
    """What a workload entrypoint (``python -m <workload> --config-json <json>``, as the templates build
    it) reads and writes; empty for any other entrypoint."""
    try:  # unbalanced quotes, bad JSON: not a workload entrypoint
        args = shlex.split(entrypoint) if isinstance(entrypoint, str) else [str(a) for a in entrypoint]
        module, text = _after(args, "-m"), _after(args, "--config-json")
        config = json.loads(text) if module in (EVALUATE_MODULE, ZONE_MODULE) and text is not None else None
    except ValueError:
        config = None
    if not isinstance(config, dict) or not isinstance(config.get("output_uri"), str):
        return JobIO()
    out, models = config["output_uri"], config.get("models")
    data = [config["data_uri"]] if isinstance(config.get("data_uri"), str) else []
    if module == ZONE_MODULE:
        return JobIO(tuple(data), (out, f"{out.rstrip('/')}/manifest.parquet"), out)
    specs = models.values() if isinstance(models, dict) else ()
    uris = [spec["uri"] for spec in specs if isinstance(spec, dict) and isinstance(spec.get("uri"), str)]
    return JobIO((*data, *uris), (f"{out.rstrip('/')}/metrics.json",), out)


#: OpenLineage's dataset namespaces: ``file``, or ``<scheme>://<authority>`` (``s3://bucket``,
#: ``gs://bucket``, ``hdfs://host:8020``, ``abfss://container@account.dfs.core.windows.net``).
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
_AUTHORITY = re.compile(r"^[A-Za-z0-9._~%!$&'()*+,;=:@\[\]-]+$")


def namespace_problem(uri: str) -> str | None:
    """Why a URI makes a malformed OpenLineage dataset namespace, else ``None``."""
    if "://" not in uri:
        return None if uri.strip() else "it is empty"
    scheme, _, rest = uri.partition("://")
    if not _SCHEME.match(scheme):
        return f"its scheme {scheme!r} is not a URI scheme (lower-case letters, digits, '+', '.', '-')"
    if scheme == "file":
        return None
    authority = rest.split("/", 1)[0]
    if not authority:
        return f"it names no bucket or host after '{scheme}://' (the namespace is {scheme}://<bucket>)"
    if not _AUTHORITY.match(authority):
        return f"its bucket or host {authority!r} has characters a URI authority cannot have"
    return None


def check_uris(value: Iterable[str] | None, name: str, *, path: bool = True) -> tuple[str, ...]:
    """Check dataset URIs (strings that make a well-formed namespace, and with ``path``, have a path), naming
    ``name`` (the argument, or where they came from), what is wrong and the fix."""
    uris = () if value is None else (value,) if isinstance(value, str) else tuple(value)
    for uri in uris:
        problem = namespace_problem(uri) if isinstance(uri, str) else "it is not a string"
        if not problem and path and not dataset_name(uri)[1]:
            problem = "it names no path"
        if problem:
            raise RayInvalidInputError(
                f"{name} must be URIs or paths, got {uri!r}: {problem}. Give them as "
                "'<scheme>://<bucket or host>/<path>' (e.g. 's3://logs/clicks') or a local path"
            )
    return uris


def check_lineage_namespaces(io: JobIO) -> None:
    """Check every dataset of a job (rendered: the workload's URIs and ``lineage_*``) before submit."""
    check_uris(io.inputs, "OpenLineage inputs (lineage_inputs, a workload's data_uri and models)", path=False)
    check_uris(io.outputs, "OpenLineage outputs (lineage_outputs, a workload's output_uri)", path=False)


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage's ``(namespace, name)`` of a URI: ``s3://bucket`` + ``key``, ``file`` + absolute path."""
    if "://" not in uri:
        return "file", os.path.abspath(uri) if uri else ""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")


#: The ``rayJob`` run facet (OpenLineage facets use camelCase): its fields and the usage record's names.
FACET_FIELDS = {"jobId": "ray_job_id", "submissionId": "submission_id", "cluster": "cluster", "mode": "mode",
                "dashboardUrl": "dashboard_url", "usage": "usage"}  # fmt: skip


@cache
def _facet_class() -> type:
    """The ``rayJob`` run facet: the Ray job behind a task."""
    from attrs import make_class
    from openlineage.client.facet_v2 import RunFacet

    return make_class("RayJobRunFacet", list(FACET_FIELDS), bases=(RunFacet,))


def operator_lineage(io: JobIO, facts: dict[str, Any]) -> Any:
    """The ``OperatorLineage`` Airflow's OpenLineage provider emits for a finished Ray job task (``facts``:
    the ``rayJob`` facet's fields, by their names in :data:`FACET_FIELDS`)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    def datasets(uris: Iterable[str]) -> list[Any]:
        return [Dataset(namespace=ns, name=name) for ns, name in map(dataset_name, dict.fromkeys(uris))]

    facet = _facet_class()(**{field: facts.get(name) for field, name in FACET_FIELDS.items()})
    return OperatorLineage(
        inputs=datasets(io.inputs), outputs=datasets(io.outputs), run_facets={"rayJob": facet}
    )


def publish_usage(
    data: dict[str, Any], *, ti: Any, artifact_uri: str | None, log: logging.Logger | Any
) -> None:
    """Log a record's line and gaps, push it as the ``usage`` XCom, write ``usage.json`` (best effort)."""
    log.info("Usage of Ray job %s: %s", data.get("submission_id"), usage_line(data))
    for name, why in sorted((data.get("not_available") or {}).items()):
        log.info("Usage record: %s not available: %s", name, why)
    if ti is not None:
        ti.xcom_push(key="usage", value=data)
    if artifact_uri:
        from airflow_ray_provider.workloads.common import artifacts

        uri = artifacts.join(artifact_uri, USAGE_FILE)
        try:
            artifacts.write_json_atomic(uri, data)
            log.info("Usage record written to %s", uri)
        except Exception as exc:
            log.warning("Could not write %s: %s", uri, exc)

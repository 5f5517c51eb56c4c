"""The templates' collect step: read the artifacts a workload's Ray job left behind (through ``pyarrow.fs``)
and push a compact, validated summary to XCom; a missing, partial or corrupt artifact fails the task
naming the file and what is wrong. The usage record (``usage.json``) is read here too, for the reports,
never failing the task.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_ray_provider.exceptions import RayProviderError
from airflow_ray_provider.launch.usage import SCHEMA, usage_line
from airflow_ray_provider.operators.lineage import USAGE_FILE

if TYPE_CHECKING:
    from airflow.sdk import Context

SUPPORTED_SCHEMA_VERSIONS = (1,)
METRICS_FILE = "metrics.json"
SUMMARY_FILE = "summary.json"


@dataclass(eq=False, repr=False, kw_only=True)
class MetricsArtifactError(RayProviderError):
    """The artifact at ``uri`` is unusable; ``problem``: ``missing``, ``partial``, ``corrupt``, ``schema``."""

    uri: str
    problem: str


def summarize_evaluation(
    document: dict[str, Any],
    *,
    artifact_uri: str,
    slice_metrics: Sequence[str] | None = None,
    max_slice_rows: int = 5000,
) -> dict[str, Any]:
    """Shrink a validated ``metrics.json`` to what the decision and the report need (XCom-sized): only
    the ``slice_metrics`` columns (``None``: all) of at most ``max_slice_rows`` slice rows."""
    uri = f"{artifact_uri.rstrip('/')}/{METRICS_FILE}"
    metrics, baseline = document["metrics"], document["baseline"]
    if not isinstance(metrics, dict) or baseline not in metrics:
        models = sorted(metrics) if isinstance(metrics, dict) else metrics
        why = f"{uri!r}: metrics has no entry for the baseline model {baseline!r} (models: {models!r})"
        raise MetricsArtifactError(why, uri=uri, problem="corrupt")
    slices = document.get("slices") or {}
    rows = list(slices.get("rows") or ())
    keep = None if slice_metrics is None else {"slice", "model", "rows", *slice_metrics}
    compact = [row if keep is None else {k: v for k, v in row.items() if k in keep} for row in rows]
    data = document.get("data") or {}
    return {
        "kind": "evaluation",
        "schema_version": document["schema_version"],
        "artifact_uri": artifact_uri,
        "metrics_uri": uri,
        "baseline": baseline,
        "models": {
            name: {k: (spec or {}).get(k) for k in ("uri", "loader", "sha256")}
            for name, spec in (document.get("models") or {}).items()
        },
        "rows": data.get("rows"),
        "data": {k: data.get(k) for k in ("uri", "rows", "groups", "label_column", "group_column")},
        "metric_directions": document["metric_directions"],
        "metrics": metrics,
        "deltas": document["deltas"],
        "bootstrap": document.get("bootstrap") or {},
        "run": {k: (document.get("run") or {}).get(k) for k in ("started_at", "finished_at", "duration_s")},
        "slices": {
            "columns": list(slices.get("columns") or ()),
            "rows": compact[:max_slice_rows],
            "total_rows": len(compact),
            "truncated": len(compact) > max_slice_rows,
        },
    }


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
    """What a report shows of a usage record: CPU-hours reserved and allocated, utilisation, cost, line,
    and ``function``'s allocated CPU-seconds as ``function_cpu_s`` (the zone job's training tasks)."""
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


class _CollectArtifactOperator(BaseOperator):
    """Read one JSON file of a job's artifact folder, checked (:meth:`read`).

    :param artifact_uri: folder the job wrote (templated): local path, ``file://``, ``s3://``, ``gs://``.
    :param require_success_marker: refuse an artifact without its ``_SUCCESS`` marker (a partial write).
    """

    template_fields: Sequence[str] = ("artifact_uri",)
    ui_color = "#e8f1fb"
    file_name: ClassVar[str]
    kind: ClassVar[str]
    required: ClassVar[tuple[str, ...]]

    def __init__(self, *, artifact_uri: str, require_success_marker: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.artifact_uri = artifact_uri
        self.require_success_marker = require_success_marker

    def read(self) -> tuple[str, dict[str, Any]]:
        """The file's URI and its document, with its ``schema_version``, ``kind`` and required keys checked;
        :class:`MetricsArtifactError` names the file and whether it is missing, partial, corrupt or of
        another schema."""
        from airflow_ray_provider.workloads.common import artifacts
        from airflow_ray_provider.workloads.common.errors import ArtifactError

        folder, name = self.artifact_uri, self.file_name
        uri = artifacts.join(folder, name)

        def error(problem: str, message: str) -> MetricsArtifactError:
            return MetricsArtifactError(message, uri=uri, problem=problem)

        try:
            present, complete = artifacts.exists(uri), artifacts.is_complete(folder)
        except ArtifactError as exc:
            raise error("missing", f"cannot open artifact {folder!r}: {exc}") from exc
        if not present:
            hint = "the job wrote its _SUCCESS marker but no" if complete else "nothing was written there: no"
            raise error("missing", f"artifact {folder!r} is missing: {hint} {name}. Check that the job's "
                        f"output_uri is {folder!r} and that the job succeeded (its log names the folder it "
                        "wrote).")  # fmt: skip
        if self.require_success_marker and not complete:
            raise error("partial", f"artifact {folder!r} is partial: {name} exists but the _SUCCESS "
                        "marker does not, so the job did not finish writing it (crashed or still running). "
                        "Re-run the job.")  # fmt: skip
        try:
            document = artifacts.read_json(uri)
        except ArtifactError as exc:
            raise error("corrupt", f"corrupt artifact file {uri!r}: {exc}") from exc
        if not isinstance(document, dict):
            got = type(document).__name__
            raise error("corrupt", f"corrupt artifact file {uri!r}: expected a JSON object, got {got}")
        version = document.get("schema_version")
        if version not in SUPPORTED_SCHEMA_VERSIONS:
            raise error("schema", f"{uri!r} has schema_version {version!r}; this provider reads "
                        f"{list(SUPPORTED_SCHEMA_VERSIONS)}. Upgrade airflow-ray-provider on the Airflow "
                        "side or pin the workload to a matching version.")  # fmt: skip
        if document.get("kind", self.kind) != self.kind:
            raise error("schema", f"{uri!r} is a {document.get('kind')!r} artifact, expected {self.kind!r}: "
                        "wrong artifact_uri?")  # fmt: skip
        missing = [key for key in self.required if key not in document]
        if missing:
            raise error("corrupt", f"{uri!r} lacks required keys {missing} (schema_version {version}): the "
                        "file is incomplete or was written by something else.")  # fmt: skip
        return uri, document


class CollectRayMetricsOperator(_CollectArtifactOperator):
    """Read an evaluation's ``metrics.json``, validate it and push a compact summary to XCom.

    The XCom value has the keys ``artifact_uri``, ``metrics_uri``, ``baseline``, ``models``, ``rows``,
    ``data``, ``metric_directions``, ``metrics`` (per model), ``deltas`` (per challenger, with
    ``delta``/``ci_low``/``ci_high``), ``bootstrap``, ``run`` and ``slices`` (``rows``, ``total_rows``,
    ``truncated``). It is what :func:`~.decision.evaluate_policy` reads. Also ``artifact_uri`` and
    ``require_success_marker`` (:class:`_CollectArtifactOperator`).

    :param slice_metrics: keep only these metrics in the per-slice rows (``None``: every metric).
    :param max_slice_rows: cap on slice rows in the XCom (the full table stays in ``slices.parquet``).
    """

    file_name, kind = METRICS_FILE, "evaluation"
    required = ("baseline", "models", "metric_directions", "metrics", "deltas", "data")

    def __init__(
        self, *, slice_metrics: Sequence[str] | None = None, max_slice_rows: int = 5000, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.slice_metrics = list(slice_metrics) if slice_metrics is not None else None
        self.max_slice_rows = max_slice_rows

    def execute(self, context: Context) -> dict[str, Any]:
        uri, document = self.read()
        summary = summarize_evaluation(document, artifact_uri=self.artifact_uri,
                                       slice_metrics=self.slice_metrics,
                                       max_slice_rows=self.max_slice_rows)  # fmt: skip
        slices = summary["slices"]
        self.log.info("Collected %s: %s rows, models %s, %s slice rows%s", uri, summary["rows"],
                      sorted(summary["metrics"]), slices["total_rows"],
                      " (truncated in XCom)" if slices["truncated"] else "")  # fmt: skip
        return summary


def count_manifest(manifest_uri: str) -> dict[str, int]:
    """Count zones per status in a ``manifest.parquet``; :class:`MetricsArtifactError` when unreadable."""
    from airflow_ray_provider.workloads.common import artifacts
    from airflow_ray_provider.workloads.common.errors import ArtifactError

    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        table = pq.read_table(pa.BufferReader(artifacts.read_bytes(manifest_uri)), columns=["status"])
    except ArtifactError as exc:
        raise MetricsArtifactError(
            f"zone manifest {manifest_uri!r}: {exc}", uri=manifest_uri, problem="missing"
        ) from exc
    except (pa.ArrowException, OSError, KeyError) as exc:
        why = f"zone manifest {manifest_uri!r} is corrupt or lacks a 'status' column: {exc}"
        raise MetricsArtifactError(why, uri=manifest_uri, problem="corrupt") from exc
    counts = pc.value_counts(table.column("status")).to_pylist()
    return {item["values"]: int(item["counts"]) for item in counts}


class CollectZoneTrainingOperator(_CollectArtifactOperator):
    """Read a zone-training run's ``summary.json`` and ``manifest.parquet``; push a compact summary.

    The XCom value has ``application``, ``artifact_uri``, ``manifest``, ``models``, ``zones_total``,
    ``succeeded``, ``failed``, ``failed_fraction``, ``failed_zones`` (first 100), ``duration_s`` and
    ``usage``. Also ``artifact_uri`` and ``require_success_marker`` (:class:`_CollectArtifactOperator`).

    :param application: expected application name; a summary of another application fails the task.
    """

    template_fields: Sequence[str] = ("artifact_uri", "application")
    file_name, kind = SUMMARY_FILE, "zone_training"
    required = ("application", "zones_total", "succeeded", "failed", "manifest")

    def __init__(self, *, application: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.application = application

    def execute(self, context: Context) -> dict[str, Any]:
        uri, document = self.read()
        if self.application and document["application"] != self.application:
            why = f"{uri!r} belongs to application {document['application']!r}, expected {self.application!r}"
            raise MetricsArtifactError(why, uri=uri, problem="schema")
        counts = count_manifest(document["manifest"])
        if any(counts.get(status, 0) != document[status] for status in ("failed", "succeeded")):
            why = (f"{uri!r} says {document['succeeded']} succeeded / {document['failed']} failed but its "
                   f"manifest {document['manifest']!r} counts {counts}: the artifact is inconsistent "
                   "(partial rewrite?)")  # fmt: skip
            raise MetricsArtifactError(why, uri=uri, problem="corrupt")
        keys = ("application", "manifest", "models", "zones_total", "succeeded", "failed", "failed_fraction")
        summary = {k: document.get(k) for k in (*keys, "duration_s")}
        run = document.get("run") or {}
        tasks = run.get("tasks") or {}
        summary.update(
            artifact_uri=self.artifact_uri,
            failed_zones=list(document.get("failed_zones") or ())[:100],
            trainer_cpu_s=run.get("trainer_cpu_s"),
            task_cpu_s=tasks.get("cpu_s"),
            usage=usage_summary(read_usage(self.artifact_uri, self.log), function=tasks.get("function")),
        )
        self.log.info("Zone training %s: %s/%s zones succeeded, %s failed (%s)", summary["application"],
                      summary["succeeded"], summary["zones_total"], summary["failed"], uri)  # fmt: skip
        if summary["usage"]:
            self.log.info(
                "Zone training %s: trainer CPU %ss, training tasks held %s CPU-s (the record: %s); usage: %s",
                summary["application"], summary["trainer_cpu_s"], summary["task_cpu_s"],
                summary["usage"].get("function_cpu_s"), summary["usage"]["line"],
            )  # fmt: skip
        return summary

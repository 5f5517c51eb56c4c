"""CollectRayMetricsOperator / CollectZoneTrainingOperator on real files (local and file:// URIs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ray_provider.templates.champion_challenger.decision import (
    DecisionPolicy,
    PrimaryMetric,
    evaluate_policy,
)
from airflow_ray_provider.templates.collect import (
    CollectRayMetricsOperator,
    CollectZoneTrainingOperator,
    MetricsArtifactError,
)
from tests.fixtures.templates import write_artifact

pytestmark = pytest.mark.unit


def _collect(uri: str, **kwargs) -> dict:
    return CollectRayMetricsOperator(task_id="collect", artifact_uri=uri, **kwargs).execute({})


def test_summary_of_a_complete_artifact_feeds_the_decision(tmp_path: Path, eval_document: dict) -> None:
    uri = write_artifact(tmp_path / "run", eval_document)
    summary = _collect(f"file://{uri}", slice_metrics=["roc_auc"])
    assert summary["metrics_uri"] == f"file://{uri}/metrics.json"
    assert summary["baseline"] == "champion" and summary["rows"] == 20_000
    assert summary["deltas"]["challenger"]["roc_auc"]["ci_low"] == pytest.approx(0.01)
    assert summary["slices"]["total_rows"] == 20 and not summary["slices"]["truncated"]
    assert set(summary["slices"]["rows"][0]) == {"slice", "model", "rows", "roc_auc"}
    json.dumps(summary)  # XCom-serialisable
    decision = evaluate_policy(DecisionPolicy(PrimaryMetric("roc_auc", 0.005)), summary)
    assert decision.outcome == "promote"


def test_slice_rows_are_capped_and_flagged(tmp_path: Path, eval_document: dict) -> None:
    summary = _collect(write_artifact(tmp_path / "run", eval_document), max_slice_rows=5)
    assert len(summary["slices"]["rows"]) == 5 and summary["slices"]["truncated"]


def test_missing_artifact_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(MetricsArtifactError, match="is missing: nothing was written there") as info:
        _collect(str(tmp_path / "nowhere"))
    assert info.value.problem == "missing" and info.value.uri.endswith("nowhere/metrics.json")


def test_partial_artifact_without_success_marker(tmp_path: Path, eval_document: dict) -> None:
    uri = write_artifact(tmp_path / "run", eval_document, success=False)
    with pytest.raises(
        MetricsArtifactError, match=r"is partial: metrics\.json exists but the _SUCCESS"
    ) as info:
        _collect(uri)
    assert info.value.problem == "partial"
    assert _collect(uri, require_success_marker=False)["baseline"] == "champion"


def test_corrupt_json_says_where(tmp_path: Path) -> None:
    uri = write_artifact(tmp_path / "run", None)
    (tmp_path / "run" / "metrics.json").write_text('{"schema_version": 1, "metr')
    with pytest.raises(MetricsArtifactError, match=r"corrupt artifact file .*metrics\.json") as info:
        _collect(uri)
    assert info.value.problem == "corrupt"


def test_unsupported_schema_version_and_kind(tmp_path: Path, eval_document: dict) -> None:
    uri = write_artifact(tmp_path / "v2", {**eval_document, "schema_version": 2})
    with pytest.raises(MetricsArtifactError, match="schema_version 2; this provider reads \\[1\\]"):
        _collect(uri)
    uri = write_artifact(tmp_path / "zones", {**eval_document, "kind": "zone_training"})
    with pytest.raises(MetricsArtifactError, match="is a 'zone_training' artifact"):
        _collect(uri)


def test_missing_sections_are_reported(tmp_path: Path, eval_document: dict) -> None:
    broken = {k: v for k, v in eval_document.items() if k != "deltas"}
    with pytest.raises(MetricsArtifactError, match=r"lacks required keys \['deltas'\]"):
        _collect(write_artifact(tmp_path / "run", broken))


def _zone_artifact(
    folder: Path, statuses: list[str], *, application: str = "eta", failed: int | None = None
) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    zones = [f"z{i}" for i in range(len(statuses))]
    pq.write_table(pa.table({"application": [application] * len(zones), "zone": zones, "status": statuses}),
                   folder / "manifest.parquet")  # fmt: skip
    n_failed = statuses.count("failed") if failed is None else failed
    summary = {
        "schema_version": 1, "kind": "zone_training", "application": application,
        "zones_total": len(zones), "succeeded": statuses.count("succeeded"), "failed": n_failed,
        "failed_fraction": n_failed / len(zones), "max_failed_fraction": 0.5, "duration_s": 1.0,
        "manifest": str(folder / "manifest.parquet"), "models": str(folder / "models"),
        "failed_zones": [z for z, s in zip(zones, statuses, strict=True) if s == "failed"],
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "_SUCCESS").write_text("")
    return str(folder)


def test_zone_summary_is_validated_against_the_manifest(tmp_path: Path) -> None:
    uri = _zone_artifact(tmp_path / "ok", ["succeeded", "failed", "succeeded"])
    summary = CollectZoneTrainingOperator(task_id="c", artifact_uri=uri, application="eta").execute({})
    assert (summary["succeeded"], summary["failed"], summary["failed_zones"]) == (2, 1, ["z1"])
    bad = _zone_artifact(tmp_path / "bad", ["succeeded", "failed"], failed=0)
    with pytest.raises(MetricsArtifactError, match="inconsistent"):
        CollectZoneTrainingOperator(task_id="c", artifact_uri=bad).execute({})
    with pytest.raises(MetricsArtifactError, match="belongs to application 'eta', expected 'other'"):
        CollectZoneTrainingOperator(task_id="c", artifact_uri=uri, application="other").execute({})

"""Model layouts: per-zone files and per-task bundles, the manifest's file + key, the loaders, pruning."""

from __future__ import annotations

import os
import pickle

import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError, ConfigError
from airflow_ray_provider.workloads.zone_training import bundles, load_zone_model, load_zone_models
from airflow_ray_provider.workloads.zone_training.config import parse_config
from airflow_ray_provider.workloads.zone_training.manifest import (
    build_summary,
    merge,
    read_manifest,
    write_artifact,
)
from airflow_ray_provider.workloads.zone_training.worker import run_batch
from tests.unit.workloads.zone_training.test_worker import (  # noqa: F401 - the autouse fixture
    _restore_thread_budget,
    context,
    make_table,
    work_items,
)

pytestmark = pytest.mark.unit

ZONES = {"a": 30, "b/c": 50, "d": 20}


def train(tmp_path, artifacts_mode: str, task_key: int = 0, **changes) -> list[dict]:
    ctx = context(tmp_path, artifacts=artifacts_mode, run_token="0123456789ab", **changes)
    return run_batch(ctx, work_items(ZONES), [make_table(ZONES)], task_key=task_key)["results"]


def finish(out: str, rows: list[dict]) -> None:
    summary = build_summary(
        application="app", rows=rows, max_failed_fraction=1.0, output_uri=out, run={}, duration_s=1
    )
    write_artifact(out, "app", rows, summary)


def test_bundled_task_writes_one_file_and_the_manifest_records_file_and_key(tmp_path) -> None:
    rows = train(tmp_path, "bundled", task_key=7)
    assert os.listdir(tmp_path / "models") == ["part-0123456789ab-00007.joblib"]
    assert {r["artifact"] for r in rows} == {str(tmp_path / "models" / "part-0123456789ab-00007.joblib")}
    assert [r["artifact_key"] for r in rows] == list(ZONES)
    finish(str(tmp_path), rows)
    manifest = {r["zone"]: r for r in pq.read_table(tmp_path / "manifest.parquet").to_pylist()}
    assert manifest["b/c"]["artifact_key"] == "b/c" and manifest["b/c"]["artifact"].endswith("-00007.joblib")


@pytest.mark.parametrize("mode", ["bundled", "per_zone", "auto"])
def test_both_layouts_round_trip_through_the_loaders(tmp_path, mode) -> None:
    rows = train(tmp_path, mode)
    finish(str(tmp_path), rows)
    one = load_zone_model(str(tmp_path), "b/c")
    assert one.coef_[0] == pytest.approx(2.0, abs=1e-3) and list(one.feature_names_in_) == ["f0", "f1"]
    every = load_zone_models(str(tmp_path))
    assert sorted(every) == sorted(ZONES) and all(m.n_features_in_ == 2 for m in every.values())
    assert sorted(load_zone_models(str(tmp_path), ["d", "a"])) == ["a", "d"]
    per_zone_files = sorted(f for f in os.listdir(tmp_path / "models") if not f.startswith("part-"))
    assert per_zone_files == (["a.joblib", "b%2Fc.joblib", "d.joblib"] if mode == "per_zone" else [])


def test_auto_gives_big_models_their_own_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bundles, "AUTO_MAX_MODEL_BYTES", 0)
    rows = train(tmp_path, "auto")
    assert [r["artifact_key"] for r in rows] == [None, None, None]
    assert sorted(os.listdir(tmp_path / "models")) == ["a.joblib", "b%2Fc.joblib", "d.joblib"]


def test_a_bundle_that_cannot_be_written_fails_its_zones_only(tmp_path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "part-0123456789ab-00000.joblib").mkdir()  # a directory where the file goes
    rows = train(
        tmp_path,
        "bundled",
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["d"]},
    )
    assert [r["status"] for r in rows] == ["failed"] * 3
    assert rows[0]["error"].startswith("could not save the model bundle: ArtifactError")
    assert rows[2]["error"] == "ValueError: bad data in zone d" and rows[0]["artifact"] is None


def test_loaders_refuse_unknown_failed_zones_and_incomplete_output(tmp_path) -> None:
    rows = train(
        tmp_path,
        "bundled",
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["d"]},
    )
    with pytest.raises(ArtifactError, match="no complete zone-training output"):
        load_zone_model(str(tmp_path), "a")
    finish(str(tmp_path), rows)
    with pytest.raises(KeyError, match="zone 'nope' is not in the manifest"):
        load_zone_model(str(tmp_path), "nope")
    with pytest.raises(KeyError, match=r"zone 'd' has no model .*failed: ValueError: bad data in zone d"):
        load_zone_model(str(tmp_path), "d")
    assert sorted(load_zone_models(str(tmp_path))) == ["a", "b/c"]


def test_merging_a_rerun_with_the_other_layout_keeps_each_zones_file(tmp_path) -> None:
    first = train(
        tmp_path,
        "bundled",
        task_key=0,
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["a"]},
    )
    out = str(tmp_path)
    finish(out, first)
    again = [dict(r, attempt=2) for r in train(tmp_path, "per_zone")]
    retried = [r for r in again if r["zone"] == "a"]
    merged = merge(read_manifest(f"{out}/manifest.parquet"), retried)
    finish(out, merged)
    rows = {r["zone"]: r for r in read_manifest(f"{out}/manifest.parquet")}
    assert rows["a"]["artifact_key"] is None and rows["a"]["artifact"].endswith("models/a.joblib")
    assert rows["d"]["artifact_key"] == "d" and rows["d"]["attempt"] == 1
    assert sorted(load_zone_models(out)) == ["a", "b/c", "d"]


def test_stale_bundles_are_pruned_and_referenced_ones_kept_however_spelled(tmp_path, monkeypatch) -> None:
    rows = train(tmp_path, "bundled", task_key=1)
    stale = tmp_path / "models" / "part-ffffffffffff-00003.joblib"
    stale.write_bytes(b"old run")
    (tmp_path / "models" / "part-of-a-zone.joblib").write_bytes(b"a zone's own model")
    monkeypatch.chdir(tmp_path)
    relative = [dict(r, artifact=os.path.relpath(r["artifact"], tmp_path)) for r in rows]
    finish(str(tmp_path), relative)
    assert sorted(os.listdir(tmp_path / "models")) == [
        "part-0123456789ab-00001.joblib",
        "part-of-a-zone.joblib",
    ]


def test_bad_artifacts_mode_is_rejected_naming_the_key() -> None:
    raw = {"application": "a", "data_uri": "d", "zone_column": "z", "label_column": "y", "output_uri": "o"}
    assert parse_config(raw).artifacts == "auto"
    with pytest.raises(ConfigError, match="'artifacts' must be one of \\['auto', 'bundled', 'per_zone'\\]"):
        parse_config({**raw, "artifacts": "zip"})


def test_a_corrupt_bundle_is_reported_with_its_path(tmp_path) -> None:
    rows = train(tmp_path, "bundled")
    finish(str(tmp_path), rows)
    path = rows[0]["artifact"]
    with open(path, "wb") as f:
        f.write(pickle.dumps({"something": "else"}))
    with pytest.raises(ArtifactError, match="is corrupt or not a bundle"):
        load_zone_model(str(tmp_path), "a")
    assert artifacts.is_complete(str(tmp_path))

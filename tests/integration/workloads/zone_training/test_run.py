"""Zone training on a real Ray head: artifacts, failures, retries of failed zones, isolation, threads."""

from __future__ import annotations

import json

import joblib
import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.zone_training import load_zone_model, load_zone_models
from airflow_ray_provider.workloads.zone_training.config import parse_config
from airflow_ray_provider.workloads.zone_training.run import run_zone_training
from tests.fixtures.zone_training import read_manifest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("layout", "models"), [("file", "auto"), ("partitioned", "per_zone")])
def test_every_zone_gets_a_model_manifest_row_and_summary(
    zone_ray, zone_data, zone_config, layout, models
) -> None:
    raw = zone_config(data_uri=zone_data[layout], run_info={"dag_id": "d", "run_id": "r"}, artifacts=models)
    summary = run_zone_training(parse_config(raw))
    out = raw["output_uri"]
    rows = read_manifest(out)
    counts = pq.read_table(zone_data[layout], columns=["zone"]).column("zone").value_counts().to_pylist()
    expected = {str(c["values"]): c["counts"] for c in counts}
    assert {z: r["rows"] for z, r in rows.items()} == expected
    assert all(r["status"] == "succeeded" and r["attempt"] == 1 for r in rows.values())
    some = rows["z00003"]
    assert json.loads(some["metrics"])["r2"] > 0.5 and some["cpu_s"] > 0 and some["duration_s"] > 0
    assert load_zone_model(out, "z00003").n_features_in_ == 4
    assert len(load_zone_models(out)) == 24
    if models == "per_zone":
        assert some["artifact_key"] is None and joblib.load(some["artifact"]).n_features_in_ == 4
    else:  # small models: one bundle per task
        assert some["artifact_key"] == "z00003"
        assert len({r["artifact"] for r in rows.values()}) == summary["run"]["tasks"]["count"]
    assert artifacts.is_complete(out)
    assert summary == artifacts.read_json(f"{out}/summary.json")
    assert (summary["zones_total"], summary["succeeded"], summary["failed"]) == (24, 24, 0)
    assert summary["run"]["run_info"] == {"dag_id": "d", "run_id": "r"} and not summary["threshold_exceeded"]
    tasks, fan_out = summary["run"]["tasks"], summary["run"]["timings_s"]["fan_out"]
    assert 1 <= tasks["count"] <= 24 and tasks["slots"] >= 1
    assert 0 < tasks["busy_s"] <= tasks["slots"] * fan_out


def test_failing_zones_then_only_failed_retrains_just_those(zone_ray, zone_config) -> None:
    bad = ["z00002", "z00017"]
    trainer = "tests.fixtures.zone_training:zone_flaky_trainer"
    raw = zone_config(
        trainer=trainer, trainer_kwargs={"fail_zones": bad}, max_failed_fraction=0.5, artifacts="bundled"
    )
    first = run_zone_training(parse_config(raw))
    assert first["failed_zones"] == bad and first["succeeded"] == 22 and not first["threshold_exceeded"]
    before = read_manifest(raw["output_uri"])
    assert before["z00002"]["error"] == "ValueError: bad data in zone z00002"

    raw["trainer_kwargs"] = {"fail_zones": ["z00017"]}  # z00002 is fixed, z00017 still fails
    raw["artifacts"] = "per_zone"  # the rerun writes the other layout; the merged manifest holds both
    second = run_zone_training(parse_config(raw), only_failed=first["manifest"])
    after = read_manifest(raw["output_uri"])
    assert second["failed_zones"] == ["z00017"] and second["zones_total"] == 24
    assert after["z00002"]["status"] == "succeeded" and after["z00002"]["attempt"] == 2
    assert after["z00017"]["attempt"] == 2 and after["z00005"]["attempt"] == 1
    assert after["z00005"]["duration_s"] == before["z00005"]["duration_s"]  # not retrained
    assert after["z00002"]["artifact_key"] is None and after["z00002"]["artifact"].endswith("/z00002.joblib")
    assert after["z00005"]["artifact"] == before["z00005"]["artifact"] and after["z00005"]["artifact_key"]
    models = load_zone_models(raw["output_uri"])
    assert sorted(models) == sorted(z for z in after if z != "z00017")
    with pytest.raises(KeyError, match="z00017"):
        load_zone_model(raw["output_uri"], "z00017")


def test_crashing_zone_is_isolated_and_slow_zone_times_out(zone_ray, zone_config) -> None:
    raw = zone_config(
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"crash_zones": ["z00007"]},
        max_failed_fraction=1.0,
        batching={"probe_zones": 4, "target_task_seconds": 0.05},
    )
    summary = run_zone_training(parse_config(raw))
    rows = read_manifest(raw["output_uri"])
    assert summary["failed_zones"] == ["z00007"]
    assert "died" in rows["z00007"]["error"].lower() or "crash" in rows["z00007"]["error"].lower()

    slow = zone_config(
        trainer="tests.fixtures.zone_training:zone_slow_trainer",
        trainer_kwargs={"slow_zones": ["z00011"]},
        zone_timeout_s=2.0,
        max_failed_fraction=1.0,
    )
    summary = run_zone_training(parse_config(slow))
    assert summary["failed_zones"] == ["z00011"]
    assert "timed out after 2s" in read_manifest(slow["output_uri"])["z00011"]["error"]


def test_thread_budget_reaches_the_zone(zone_ray, zone_config) -> None:
    raw = zone_config(trainer="tests.fixtures.zone_training:zone_env_trainer", num_cpus=2)
    run_zone_training(parse_config(raw))
    metrics = [json.loads(r["metrics"]) for r in read_manifest(raw["output_uri"]).values()]
    assert len(metrics) == 24
    for m in metrics:
        assert m["OMP_NUM_THREADS"] == m["MKL_NUM_THREADS"] == m["OPENBLAS_NUM_THREADS"] == 2
        assert m["max_pool_threads"] <= 2


def test_a_zone_blocked_in_c_code_is_stopped_at_its_own_limit(zone_ray, zone_config) -> None:
    """``time.sleep(60)`` releases the GIL: the worker's zone clock reports the zone, the driver kills the
    task with ``ray.cancel(force=True)``; its batch-mates train again in other tasks."""
    raw = zone_config(
        trainer="tests.fixtures.zone_training:zone_slow_trainer",
        trainer_kwargs={"sleep_zones": ["z00004"]},
        zone_timeout_s=2.0,  # generous: a loaded 2-core machine must not time out the normal zones
        max_failed_fraction=1.0,
        batching={"max_zones_per_task": 4, "probe_zones": 4},
    )
    summary = run_zone_training(parse_config(raw))
    errors = {z: r["error"] for z, r in read_manifest(raw["output_uri"]).items() if r["error"]}
    assert errors == {"z00004": "timed out after 2s (zone_timeout_s)"}
    assert summary["succeeded"] == 23
    assert summary["duration_s"] < 40  # the 60 s sleep was cut short


def test_a_zone_holding_the_gil_is_killed_by_the_backstop(zone_ray, zone_config, monkeypatch) -> None:
    """A C call that holds the GIL keeps the zone clock's thread from reporting: the backstop kills it."""
    from airflow_ray_provider.workloads.zone_training import scheduler as zone_scheduler

    monkeypatch.setattr(zone_scheduler, "BACKSTOP_GRACE_S", 2.0)
    raw = zone_config(
        trainer="tests.integration.workloads.zone_training.trainers:zone_gil_trainer",
        trainer_kwargs={"gil_zones": ["z00004"]},
        zone_timeout_s=2.0,
        max_failed_fraction=1.0,
        batching={"max_zones_per_task": 1, "probe_zones": 1},
    )
    summary = run_zone_training(parse_config(raw))
    errors = {z: r["error"] for z, r in read_manifest(raw["output_uri"]).items() if r["error"]}
    assert summary["failed_zones"] == ["z00004"] and summary["succeeded"] == 23, errors
    assert "ran past the zone_timeout_s (2s) backstop" in errors["z00004"]
    assert summary["duration_s"] < 40  # the regular expression's minutes were cut short


def test_a_zone_no_node_can_hold_fails_before_any_zone_on_a_real_cluster(zone_ray, zone_config) -> None:
    """It used to hang ("0/24 done, 1 in flight"): the 4-CPU head has no autoscaler, so it fails at once."""
    import time

    from airflow_ray_provider.workloads.common.errors import ConfigError

    raw = zone_config(num_cpus=64)
    started = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"num_cpus: each zone asks for 64 CPUs, but this Ray cluster has at most 4"
    ):
        run_zone_training(parse_config(raw))
    assert time.monotonic() - started < 30
    assert not artifacts.exists(f"{raw['output_uri']}/manifest.parquet")

"""Both engines on the same data: identical models and manifests; the local engine's failure isolation.

The local engine (worker processes, no Ray) must be a drop-in for Ray tasks: same batches of trainer
code, so the same models bit for bit, the same manifest rows and the same failure semantics (a zone that
raises, a worker that dies, a zone past ``zone_timeout_s``, also one stuck in C code: the driver reads the
worker's zone clock and kills the worker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from airflow_ray_provider.workloads.zone_training import load_zone_models
from airflow_ray_provider.workloads.zone_training.config import parse_config
from airflow_ray_provider.workloads.zone_training.run import run_zone_training
from tests.fixtures.zone_training import read_manifest

pytestmark = pytest.mark.integration

#: Manifest columns that must agree between engines (durations, CPU seconds and file names differ).
SAME = ("status", "rows", "attempt", "metrics", "error")


@pytest.mark.parametrize("layout", ["file", "partitioned"])
def test_both_engines_train_identical_models_and_manifests(zone_ray, zone_data, zone_config, layout) -> None:
    summaries, manifests, models = {}, {}, {}
    for engine in ("ray", "local"):
        raw = zone_config(
            data_uri=zone_data[layout],
            engine=engine,
            output_uri=f"{zone_config()['output_uri']}-{engine}",
            trainer="tests.fixtures.zone_training:zone_flaky_trainer",
            trainer_kwargs={"fail_zones": ["z00005"]},
            max_failed_fraction=0.5,
        )
        summaries[engine] = run_zone_training(parse_config(raw))
        manifests[engine] = read_manifest(raw["output_uri"])
        models[engine] = load_zone_models(raw["output_uri"])
    assert summaries["ray"]["run"]["engine"]["name"] == "ray" and summaries["ray"]["run"]["ray_session"]
    assert summaries["local"]["run"]["engine"]["name"] == "local"
    assert summaries["local"]["run"]["ray_session"] == "none"
    for key in ("zones_total", "succeeded", "failed", "failed_zones"):
        assert summaries["ray"][key] == summaries["local"][key], key
    assert summaries["local"]["failed_zones"] == ["z00005"] and summaries["local"]["succeeded"] == 23
    ray_rows, local_rows = manifests["ray"], manifests["local"]
    assert sorted(ray_rows) == sorted(local_rows) and len(local_rows) == 24
    for zone, row in ray_rows.items():
        assert {k: row[k] for k in SAME} == {k: local_rows[zone][k] for k in SAME}, zone
    assert sorted(models["ray"]) == sorted(models["local"]) and len(models["local"]) == 23
    for zone, model in models["ray"].items():
        other = models["local"][zone]
        assert np.array_equal(model.coef_, other.coef_) and model.intercept_ == other.intercept_, zone


def test_the_local_engine_isolates_a_crashing_zone_and_times_out_a_slow_one(zone_config) -> None:
    raw = zone_config(
        engine="local",
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"crash_zones": ["z00007"], "fail_zones": ["z00002"]},
        max_failed_fraction=1.0,
        batching={"probe_zones": 4, "target_task_seconds": 0.05},
    )
    summary = run_zone_training(parse_config(raw))
    rows = read_manifest(raw["output_uri"])
    assert summary["failed_zones"] == ["z00002", "z00007"] and summary["succeeded"] == 22
    assert rows["z00002"]["error"] == "ValueError: bad data in zone z00002"
    assert "worker process died (exit code 3)" in rows["z00007"]["error"]

    slow = zone_config(
        engine="local",
        output_uri=f"{raw['output_uri']}-slow",
        trainer="tests.fixtures.zone_training:zone_slow_trainer",
        trainer_kwargs={"slow_zones": ["z00011"]},
        zone_timeout_s=2.0,
        max_failed_fraction=1.0,
    )
    summary = run_zone_training(parse_config(slow))
    assert summary["failed_zones"] == ["z00011"]
    assert "timed out after 2s" in read_manifest(slow["output_uri"])["z00011"]["error"]


@pytest.mark.parametrize(
    ("trainer", "kwargs"),
    [
        ("tests.fixtures.zone_training:zone_slow_trainer", {"sleep_zones": ["z00004"]}),
        ("tests.integration.workloads.zone_training.trainers:zone_gil_trainer", {"gil_zones": ["z00004"]}),
    ],
    ids=["sleep", "gil"],
)
def test_the_local_engine_kills_a_zone_stuck_in_c_code(zone_config, trainer, kwargs) -> None:
    """One C call (``time.sleep``, or a regular expression that holds the GIL): the driver reads the worker's
    zone clock from shared memory, so either is stopped at the zone's own limit."""
    raw = zone_config(
        engine="local",
        trainer=trainer,
        trainer_kwargs=kwargs,
        zone_timeout_s=2.0,
        max_failed_fraction=1.0,
        batching={"max_zones_per_task": 4, "probe_zones": 4},
    )
    summary = run_zone_training(parse_config(raw))
    errors = {z: r["error"] for z, r in read_manifest(raw["output_uri"]).items() if r["error"]}
    assert errors == {"z00004": "timed out after 2s (zone_timeout_s)"}
    assert summary["succeeded"] == 23
    assert summary["duration_s"] < 40  # the C call's minute or more was cut short


def test_a_standalone_command_trains_locally_without_ray(zone_config, tmp_path) -> None:
    """``engine: auto`` standalone: worker processes, no Ray session at all, and nothing left behind."""
    raw = zone_config(output_uri=str(tmp_path / "zones"))
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONWARNINGS"}
    env["TMPDIR"] = str(tmp)
    cmd = [
        sys.executable,
        "-m",
        "airflow_ray_provider.workloads.zone_training",
        "--config-json",
        json.dumps(raw),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "engine local: auto: standalone" in done.stderr and "Ray session" not in done.stderr
    assert not [line for line in done.stderr.splitlines() if "Warning" in line or " WARNING " in line]
    with open(tmp_path / "zones" / "summary.json") as fh:
        run = json.load(fh)["run"]
    assert run["engine"]["name"] == "local" and run["ray_session"] == "none"
    assert run["tasks"]["slots"] >= 1 and set(run["timings_s"]) >= {"validate", "stage", "fan_out"}
    assert os.listdir(tmp) == [], os.listdir(tmp)

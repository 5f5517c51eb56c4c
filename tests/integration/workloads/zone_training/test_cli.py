"""The real CLI, as a Ray job runs it: exit status against max_failed_fraction, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration


def run_cli(args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    cmd = [sys.executable, "-m", "airflow_ray_provider.workloads.zone_training", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_exit_status_follows_max_failed_fraction(ray_head, ray_head_token, zone_config, tmp_path) -> None:
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_head_token}
    raw = zone_config(
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["z00001", "z00002", "z00003"]},  # 3 of 24 = 12.5 %
        max_failed_fraction=0.1,
        ray_address=ray_head.gcs_address,
    )
    config_file = tmp_path / "zones.yaml"
    config_file.write_text(json.dumps(raw))  # JSON is valid YAML
    done = run_cli(["--config", str(config_file)], env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "3 of 24 zones failed (12.5%), above max_failed_fraction 10.0%" in done.stderr
    closing = [line for line in done.stderr.splitlines() if "zones: 24/24 done" in line]
    assert "zones: 24/24 done (21 succeeded, 3 failed), 0 remaining (100.0%)" in closing[-1]
    assert "in flight |" in closing[-1] and "task goal" not in closing[-1]  # nothing left to batch
    assert " airflow_ray_provider.workloads.zone_training.scheduler: " in closing[-1]  # its own logger
    assert "Ray session: connecting to ray_address" in done.stderr
    manifest = f"{raw['output_uri']}/manifest.parquet"
    assert pq.read_table(manifest).column("status").to_pylist().count("failed") == 3

    other = {**raw, "application": "another-app"}
    refused = run_cli(["--config-json", json.dumps(other), "--only-failed", manifest], env)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith("zone_training: error: --only-failed manifest")
    assert "belongs to application ['test-app'], not 'another-app'" in refused.stderr


def in_job_env(ray_head, token: str) -> dict[str, str]:
    """The environment Ray's job supervisor gives an entrypoint (its job config, the cluster's address)."""
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {}, "metadata": {}}),
        "RAY_ADDRESS": ray_head.gcs_address,
    }


def test_inside_a_job_bad_input_fails_with_its_own_error_before_any_work(
    ray_head, ray_head_token, zone_config, tmp_path
) -> None:
    env = in_job_env(ray_head, ray_head_token)
    out = tmp_path / "zones-out"
    out.mkdir()
    (out / "_SUCCESS").write_text("")  # an earlier run's: kept, since nothing is trained
    raw = zone_config(zone_column="region", output_uri=str(out))
    done = run_cli(["--config-json", json.dumps(raw)], env)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("zone_training: error: zone_column 'region' is not a column of"), last
    assert "Ray session" not in done.stderr  # checked before Ray is touched
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS"]  # no model, no manifest

    bad_trainer = zone_config(trainer="xgboost_magic", output_uri=str(out))
    done = run_cli(["--config-json", json.dumps(bad_trainer)], env)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("zone_training: error: unknown trainer 'xgboost_magic'")
    )


def test_inside_a_job_the_zones_train_on_the_jobs_cluster(
    ray_head, ray_head_token, zone_config, tmp_path
) -> None:
    raw = zone_config()
    done = run_cli(["--config-json", json.dumps(raw)], in_job_env(ray_head, ray_head_token))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "zones-out" / "summary.json").read_text())
    assert (summary["succeeded"], summary["run"]["ray_session"]) == (24, "job")
    assert set(summary["run"]["timings_s"]) >= {"validate", "connect", "stage", "fan_out"}

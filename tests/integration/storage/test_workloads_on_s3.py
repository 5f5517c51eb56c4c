"""Both workloads and both collectors through a real S3 API (moto's server on 127.0.0.1, IAM check on).

The workloads run as a Ray job runs them (``python -m ...`` with the job's environment), configured only
through the standard AWS variables: the URIs are plain ``s3://bucket/key``. An endpoint nothing answers
at, a missing bucket and a refused key each fail before any work, with one line naming the config field
and no credential anywhere in the output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.fixtures.dag_runs import run_dag, task_states, write_dag, xcom_value
from tests.fixtures.s3 import S3Server, upload_folder

pytestmark = pytest.mark.integration
EVALUATE = "airflow_ray_provider.workloads.evaluate"
ZONES = "airflow_ray_provider.workloads.zone_training"


def run_workload(module: str, config: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    """The workload's CLI in a fresh process with this process's environment (``env`` on top)."""
    cmd = [sys.executable, "-m", module, "--config-json", json.dumps(config)]
    return subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def bucket(s3: S3Server) -> str:
    return s3.make_bucket("workloads")


@pytest.fixture(scope="module")
def eval_on_s3(s3: S3Server, bucket: str, eval_sample: dict[str, str]) -> dict[str, Any]:
    """The sample click log and both models in the bucket, and an evaluation config reading them."""
    data = upload_folder(s3, eval_sample["data_uri"], bucket, "logs/dt=2026-12-01")
    champion = upload_folder(s3, eval_sample["champion_uri"], bucket, "models/champion.joblib")
    challenger = upload_folder(s3, eval_sample["challenger_uri"], bucket, "models/challenger.joblib")
    return {
        "data_uri": data,
        "columns": {"label": "clicked", "group": "request_id", "slices": ["zone"]},
        "models": {"champion": {"uri": champion}, "challenger": {"uri": challenger}},
        "output_uri": f"s3://{bucket}/eval/out",
        "bootstrap": {"samples": 50, "seed": 7, "buckets": 64},
        "scoring": {"concurrency": 2, "num_cpus": 0.25, "read_num_cpus": 0.25},
        "progress_interval_s": 1.0,
    }


@pytest.fixture(scope="module")
def evaluated(s3: S3Server, bucket: str, eval_on_s3: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The evaluation run twice from the bucket, once per engine; each writes its own artifact there."""
    documents = {}
    for engine in ("local", "ray"):
        done = run_workload(
            EVALUATE, {**eval_on_s3, "engine": engine, "output_uri": f"s3://{bucket}/eval/{engine}"}
        )
        assert done.returncode == 0, done.stderr[-3000:]
        body = s3.client().get_object(Bucket=bucket, Key=f"eval/{engine}/metrics.json")["Body"].read()
        documents[engine] = json.loads(body)
    return documents


def test_evaluation_reads_logs_and_models_from_s3_and_writes_its_artifact_there_on_both_engines(
    s3: S3Server, bucket: str, evaluated: dict[str, dict[str, Any]], eval_on_s3: dict[str, Any]
) -> None:
    for engine, document in evaluated.items():
        assert document["run"]["engine"]["name"] == engine
        assert document["data"]["uri"] == eval_on_s3["data_uri"] and document["data"]["rows"] == 20_000
        assert document["models"]["champion"]["uri"] == eval_on_s3["models"]["champion"]["uri"]
        assert {"metrics.json", "slices.parquet", "_SUCCESS"} <= {
            key.rsplit("/", 1)[-1] for key in s3.keys(bucket, f"eval/{engine}/")
        }
    assert evaluated["ray"]["metrics"] == evaluated["local"]["metrics"]  # exact, whatever the engine
    assert evaluated["ray"]["deltas"] == evaluated["local"]["deltas"]


@pytest.fixture(scope="module")
def zones_on_s3(s3: S3Server, bucket: str, zone_data: dict[str, str]) -> dict[str, Any]:
    """Zone training from the bucket on a private Ray, its models, manifest and summary written there."""
    config = {
        "application": "eta",
        "data_uri": upload_folder(s3, zone_data["file"], bucket, "zones/in/data.parquet"),
        "zone_column": "zone",
        "label_column": "y",
        "output_uri": f"s3://{bucket}/zones/out",
        "engine": "ray",
        "max_retries": 0,
        "progress_interval_s": 0.5,
        "batching": {"target_task_seconds": 0.05, "probe_zones": 2},
    }
    done = run_workload(ZONES, config)
    assert done.returncode == 0, done.stderr[-3000:]
    return config


def test_zone_training_reads_its_data_from_s3_and_writes_models_and_manifest_there(
    s3: S3Server, bucket: str, zones_on_s3: dict[str, Any]
) -> None:
    keys = s3.keys(bucket, "zones/out/")
    assert {"zones/out/manifest.parquet", "zones/out/summary.json", "zones/out/_SUCCESS"} <= set(keys)
    assert any(key.startswith("zones/out/models/") for key in keys), keys
    body = s3.client().get_object(Bucket=bucket, Key="zones/out/manifest.parquet")["Body"].read()
    import pyarrow as pa

    statuses = pq.read_table(pa.BufferReader(body)).column("status").to_pylist()
    assert len(statuses) == 24 and set(statuses) == {"succeeded"}


COLLECT_DAG = """
import pendulum
from airflow.sdk import DAG

from airflow_ray_provider.templates.collect import CollectRayMetricsOperator, CollectZoneTrainingOperator

with DAG("collect_from_s3", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    CollectRayMetricsOperator(task_id="metrics", artifact_uri={metrics!r})
    CollectZoneTrainingOperator(task_id="zones", artifact_uri={zones!r})
"""


def test_the_collectors_read_both_artifacts_back_from_s3(
    dags_folder: Any, evaluated: dict[str, Any], zones_on_s3: dict[str, Any], bucket: str
) -> None:
    metrics_uri, zones_uri = f"s3://{bucket}/eval/ray", zones_on_s3["output_uri"]
    dag = write_dag("collect_from_s3", COLLECT_DAG.format(metrics=metrics_uri, zones=zones_uri))

    dag_run = run_dag(dag)

    assert task_states(dag_run) == {"metrics": "success", "zones": "success"}
    metrics = xcom_value(dag_run, "metrics")
    assert metrics["artifact_uri"] == metrics_uri and metrics["rows"] == 20_000
    assert metrics["metrics"] == evaluated["ray"]["metrics"]
    assert metrics["models"]["challenger"]["uri"].startswith("s3://")
    zones = xcom_value(dag_run, "zones")
    assert (
        zones["application"] == "eta"
        and zones["zones_total"] == zones["succeeded"] == 24
        and zones["failed"] == 0
    )


# ------------------------------------------------------------------------ refused before any work


def _eval_config(eval_on_s3: dict[str, Any], bucket: str, **changes: Any) -> dict[str, Any]:
    return {**eval_on_s3, "output_uri": f"s3://{bucket}/refused/out", **changes}


CASES: dict[str, tuple[str, Callable[..., dict[str, Any]], Callable[[S3Server], dict[str, str]], str]] = {
    "evaluation, endpoint nothing answers at": (
        EVALUATE,
        lambda cfg, bucket: cfg,
        lambda s3: {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"},
        "data_uri: cannot reach the object store at http://127.0.0.1:9",
    ),
    "evaluation, refused secret": (
        EVALUATE,
        lambda cfg, bucket: cfg,
        lambda s3: {"AWS_SECRET_ACCESS_KEY": "not-" + s3.secret_key},
        "data_uri: the object store refused the credentials",
    ),
    "evaluation, a model in a missing bucket": (
        EVALUATE,
        lambda cfg, bucket: {
            **cfg,
            "models": {**cfg["models"], "challenger": {"uri": "s3://no-such-bkt/m.joblib"}},
        },
        lambda s3: {},
        "models.challenger.uri: the bucket 'no-such-bkt' of 's3://no-such-bkt/m.joblib' does not exist",
    ),
    "evaluation, output to a missing bucket": (
        EVALUATE,
        lambda cfg, bucket: {**cfg, "output_uri": "s3://no-such-bkt/out"},
        lambda s3: {},
        "output_uri: the bucket 'no-such-bkt'",
    ),
    "zone training, endpoint nothing answers at": (
        ZONES,
        lambda cfg, bucket: cfg,
        lambda s3: {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"},
        "data_uri: cannot reach the object store",
    ),
    "zone training, unknown key": (
        ZONES,
        lambda cfg, bucket: cfg,
        lambda s3: {"AWS_ACCESS_KEY_ID": "AKIA" + "0" * 16},
        "data_uri: the object store refused the credentials",
    ),
    "zone training, data in a missing bucket": (
        ZONES,
        lambda cfg, bucket: {**cfg, "data_uri": "s3://no-such-bkt/zones"},
        lambda s3: {},
        "data_uri: the bucket 'no-such-bkt'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_object_store_that_cannot_work_fails_before_any_work_naming_the_field(
    case: str, s3: S3Server, bucket: str, eval_on_s3: dict[str, Any], zones_on_s3: dict[str, Any]
) -> None:
    module, change, env, expected = CASES[case]
    base = (
        _eval_config(eval_on_s3, bucket)
        if module == EVALUATE
        else {**zones_on_s3, "output_uri": f"s3://{bucket}/refused/zones"}
    )
    before = s3.keys(bucket)

    done = run_workload(module, change(base, bucket), **env(s3))

    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert expected in last, last
    assert "Ray session" not in done.stdout + done.stderr  # refused before Ray was touched
    assert "preflight ok" not in done.stdout + done.stderr  # and before any data was read
    for secret in (s3.secret_key, s3.access_key, "not-" + s3.secret_key):
        assert secret not in done.stdout + done.stderr
    assert s3.keys(bucket) == before  # nothing written

"""What a job reads and writes, from its workload entrypoint, and the OpenLineage it becomes."""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.operators.lineage import (
    EVALUATE_MODULE,
    ZONE_MODULE,
    check_uris,
    dataset_name,
    operator_lineage,
    workload_io,
)

pytestmark = pytest.mark.unit


def test_evaluation_entrypoint_names_log_models_and_metrics() -> None:
    config = {"data_uri": "s3://logs/clicks/dt=1", "output_uri": "s3://ml/val/1",
              "models": {"champion": {"uri": "/m/a.joblib"}, "challenger": {"factory": "x:y"}}}  # fmt: skip
    io = workload_io(["python", "-m", EVALUATE_MODULE, "--config-json", json.dumps(config)])
    assert io.inputs == ("s3://logs/clicks/dt=1", "/m/a.joblib")
    assert io.outputs == ("s3://ml/val/1/metrics.json",) and io.artifact_uri == "s3://ml/val/1"


def test_zone_entrypoint_as_a_string_names_data_models_and_manifest() -> None:
    config = json.dumps({"data_uri": "/d/zones", "output_uri": "/out/app"})
    io = workload_io(f"python -m {ZONE_MODULE} --config-json '{config}'")
    assert io.inputs == ("/d/zones",) and io.outputs == ("/out/app", "/out/app/manifest.parquet")


def test_other_entrypoints_name_nothing() -> None:
    assert workload_io("python job.py").inputs == ()
    assert workload_io(["python", "-m", EVALUATE_MODULE, "--config-json", "{not json"]).outputs == ()


def test_dataset_names_follow_openlineage_naming() -> None:
    assert dataset_name("s3://bucket/a/b.parquet") == ("s3://bucket", "a/b.parquet")
    assert dataset_name("file:///tmp/x") == ("file", "/tmp/x")
    assert dataset_name("/tmp/y") == ("file", "/tmp/y")
    with pytest.raises(RayInvalidInputError, match="lineage_inputs"):
        check_uris([""], "lineage_inputs")


def test_operator_lineage_carries_datasets_and_the_ray_run_facet() -> None:
    config = json.dumps({"data_uri": "/d", "output_uri": "/o", "models": {"a": {"uri": "/m"}}})
    lineage = operator_lineage(
        workload_io(["py", "-m", EVALUATE_MODULE, "--config-json", config]),
        {"mode": "ephemeral", "submission_id": "sid", "ray_job_id": "02000000", "cluster": "c",
         "usage": {"reserved": {"CPU": 1.0}}},
    )  # fmt: skip
    assert [d.name for d in lineage.inputs] == ["/d", "/m"] and [d.name for d in lineage.outputs] == [
        "/o/metrics.json"
    ]
    facet = lineage.run_facets["rayJob"]
    assert (facet.jobId, facet.submissionId, facet.mode, facet.usage) == (
        "02000000",
        "sid",
        "ephemeral",
        {"reserved": {"CPU": 1.0}},
    )


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("s3:///clicks", "names no bucket or host"),
        ("S3 ://logs/clicks", "is not a URI scheme"),
        ("gs://bad bucket/x", "has characters"),
        ("", "is empty"),
    ],
)
def test_a_malformed_openlineage_namespace_is_refused_naming_the_field(uri: str, why: str) -> None:
    from airflow_ray_provider.operators.lineage import JobIO, check_lineage_namespaces

    with pytest.raises(RayInvalidInputError, match="lineage_inputs must be URIs") as parsed:
        check_uris([uri], "lineage_inputs")
    assert why in str(parsed.value)
    with pytest.raises(
        RayInvalidInputError, match=f"OpenLineage outputs .*{uri!r}: .*{why}.*s3://logs/clicks"
    ):
        check_lineage_namespaces(JobIO(outputs=(uri,)))
    check_lineage_namespaces(JobIO(("s3://logs/clicks", "/data/x", "file:///tmp/y"), ("hdfs://nn:8020/out",)))

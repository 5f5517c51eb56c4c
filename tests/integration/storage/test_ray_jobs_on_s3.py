"""Ray jobs whose inputs and outputs live in S3 (moto's server on 127.0.0.1), run by ``dag.test()``.

``@task.ray`` with ``cluster_conn_id=None`` (a local head of the task's own, as docs/task_ray.md says)
returns a DataFrame through an ``s3://`` ``result_uri``; a one-task job runs from a working dir that is a
zip in the bucket and gets its ``usage.json`` beside its ``s3://`` artifact. The heads inherit the AWS
variables of the process that starts them, as an Airflow worker's do.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from airflow_ray_provider.launch.usage.record import SCHEMA
from tests.fixtures.dag_runs import run_dag, task_states, write_dag, xcom_value
from tests.fixtures.s3 import S3Server

pytestmark = pytest.mark.integration

#: The zipped working dir's job: writes through pyarrow with nothing but the AWS variables it inherits.
JOB = """
import json, sys
import pyarrow.fs as pafs
import ray

ray.init()
fs, path = pafs.FileSystem.from_uri(sys.argv[1])
with fs.open_output_stream(path + "/hello.json") as out:
    out.write(json.dumps({"from": "the zipped job", "cpus": ray.cluster_resources()["CPU"]}).encode())
print("wrote", sys.argv[1], flush=True)
"""

DAG_SOURCE = """
import pendulum
from airflow.sdk import DAG, task

from airflow_ray_provider.operators import EphemeralRayJobOperator

with DAG("ray_jobs_on_s3", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

    @task.ray(cluster_conn_id=None, result_uri={results!r}, poll_interval=0.3)
    def zone_counts():
        import pandas as pd

        return pd.DataFrame({{"zone": ["a", "b", "c"], "rows": [3, 4, 5]}})

    zone_counts()
    EphemeralRayJobOperator(
        task_id="zipped_job",
        entrypoint=["python", "job.py", {artifact!r}],
        runtime_env={{"working_dir": {zip_uri!r}}},
        artifact_uri={artifact!r},
        local_options={{"num_cpus": 2}},
        poll_interval=0.3,
    )
"""


def test_result_uri_working_dir_zip_and_usage_record_all_in_s3(
    dags_folder: Path, s3: S3Server, tmp_path: Path
) -> None:
    bucket = s3.make_bucket("jobs")
    archive = tmp_path / "job.zip"
    with zipfile.ZipFile(archive, "w") as zf:  # Ray's rule: one top-level folder, the working dir
        zf.writestr("job/job.py", JOB)
    s3.client().upload_file(str(archive), bucket, "code/job.zip")
    artifact = f"s3://{bucket}/runs/zipped"
    dag = write_dag(
        "ray_jobs_on_s3",
        DAG_SOURCE.format(
            results=f"s3://{bucket}/results", artifact=artifact, zip_uri=f"s3://{bucket}/code/job.zip"
        ),
    )

    dag_run = run_dag(dag)

    assert task_states(dag_run) == {"zone_counts": "success", "zipped_job": "success"}
    from airflow.sdk.serde import deserialize

    frame: Any = deserialize(xcom_value(dag_run, "zone_counts"))
    assert frame.to_dict("list") == {"zone": ["a", "b", "c"], "rows": [3, 4, 5]}
    results = [
        key for key in s3.keys(bucket, "results/") if not key.endswith("/")
    ]  # pyarrow's folder markers
    assert len(results) == 1 and results[0].endswith("/return_value.pkl"), results  # through S3

    client = s3.client()
    hello = json.loads(client.get_object(Bucket=bucket, Key="runs/zipped/hello.json")["Body"].read())
    assert hello == {"from": "the zipped job", "cpus": 2.0}
    usage = json.loads(client.get_object(Bucket=bucket, Key="runs/zipped/usage.json")["Body"].read())
    assert usage["schema"] == SCHEMA and usage["job_status"] == "SUCCEEDED", usage
    assert usage["reserved"]["CPU"] > 0

"""TaskFlow on Ray: extract -> compute on Ray -> use the value downstream, with ``@task.ray``.

The shape of astro-provider-ray's TaskFlow examples, with real return values: the Ray task's value is
its XCom (a number through the job log; a pandas DataFrame through ``result_uri``), so the downstream
task simply takes it as an argument. The cluster is an ephemeral local Ray head per run (setup and
teardown tasks), a KubeRay RayCluster with ``AIRFLOW_RAY_CLUSTER_CONN_ID``, or a standing cluster with
``AIRFLOW_RAY_CONN_ID`` (see :mod:`airflow_ray_provider.templates.defaults`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_ray_provider.templates import defaults
from airflow_ray_provider.templates.common import create_cluster_task, delete_cluster_task, job_target

CLUSTER = defaults.cluster_settings()
#: Where the DataFrame goes (any pyarrow.fs folder both Airflow and Ray can reach: s3://, gs://, a path).
RESULTS = defaults.data_root(Path(__file__).parent) + "/ray_task_results"

with DAG(
    "ray_taskflow",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["ray", "taskflow", "example"],
) as dag:
    create = create_cluster_task(CLUSTER) if CLUSTER.ephemeral else None
    on_ray = job_target(CLUSTER, create)

    # [START ray_taskflow]
    @task
    def extract() -> list[float]:
        return [12.5, 3.0, 7.25, 9.0, 1.5, 4.75]

    @task.ray(**on_ray, entrypoint_num_cpus=1, poll_interval=1.0)
    def mean_squared(values) -> float:
        import ray

        @ray.remote
        def square(x: float) -> float:
            return x * x

        squares = ray.get([square.remote(v) for v in values])  # Ray tasks on the cluster
        return sum(squares) / len(squares)

    @task.ray(**on_ray, result_uri=RESULTS, poll_interval=1.0)
    def bucketed(values) -> Any:
        import pandas as pd

        frame = pd.DataFrame({"value": values})
        frame["bucket"] = pd.cut(frame["value"], bins=[0, 5, 10, 20], labels=["low", "mid", "high"])
        return frame.groupby("bucket", observed=True)["value"].agg(["count", "mean"]).reset_index()

    @task
    def report(mean_square, buckets) -> dict[str, Any]:
        summary = {"mean_square": round(mean_square, 4), "buckets": buckets.to_dict(orient="records")}
        print(f"Mean squared value: {summary['mean_square']}; buckets: {summary['buckets']}")
        return summary

    values = extract()
    summary = report(mean_squared(values), bucketed(values))
    # [END ray_taskflow]

    if create is not None:  # the Ray tasks take create.output, so they already run after it
        summary >> delete_cluster_task(create, CLUSTER)

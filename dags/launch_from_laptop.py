"""The laptop example as a DAG: the entrypoint and working dir of ``airflow-ray run``, unchanged.

On a laptop::

    airflow-ray run --local --working-dir dags/laptop_job -- python job.py

Here, ``EphemeralRayJobOperator`` gives the job a local ephemeral head of its own by default (set
``cluster_conn_id`` to a ``kuberay`` connection to run it on KubeRay instead).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator

#: The same folder and command as the laptop's ``airflow-ray run``.
JOB_DIR = Path(__file__).parent / "laptop_job"
ENTRYPOINT = ["python", "job.py"]

with DAG(
    "launch_from_laptop",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "ray"],
) as dag:
    EphemeralRayJobOperator(
        task_id="run_job",
        entrypoint=ENTRYPOINT,
        runtime_env={"working_dir": str(JOB_DIR)},
        local_options={"num_cpus": 2},
        poll_interval=1.0,
    )

"""A Ray job that runs unchanged from a laptop and from the ``launch_from_laptop`` DAG.

From a laptop (an ephemeral local Ray head, this folder shipped as the job's working dir)::

    airflow-ray run --local --working-dir dags/laptop_job -- python job.py

From Airflow: ``dags/launch_from_laptop.py`` runs the same entrypoint with the same working dir.
"""

import ray


@ray.remote
def square(x: int) -> int:
    return x * x


if __name__ == "__main__":  # run as the job's entrypoint, never when Airflow scans the DAGs folder
    ray.init()
    print("sum of squares:", sum(ray.get([square.remote(i) for i in range(10)])), flush=True)

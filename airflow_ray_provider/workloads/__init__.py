"""Code that runs inside Ray jobs (never imports Airflow).

``common`` (artifacts, errors, the CLI runner), ``evaluation`` (champion-vs-challenger scoring) and
``zone_training`` (one model per zone); ``samples`` makes demo and test data. The commands are
``python -m airflow_ray_provider.workloads.evaluate`` and
``python -m airflow_ray_provider.workloads.zone_training``.
"""

__all__: list[str] = []

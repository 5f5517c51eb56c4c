"""Code that runs inside Ray jobs (never imports Airflow).

``common`` (what both share: artifacts, errors, config checks, the Ray session rule, progress lines,
the CLI runner), ``evaluation`` (champion-vs-challenger scoring) and ``zone_training`` (one model per
zone), which never import each other; ``samples`` makes demo and test data. The commands are
``python -m airflow_ray_provider.workloads.evaluate`` and
``python -m airflow_ray_provider.workloads.zone_training``.
"""

__all__: list[str] = []

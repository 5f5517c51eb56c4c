"""DAG templates, one package per application, and the pieces they share.

``champion_challenger`` (nightly champion-vs-challenger validation) and ``zone_training`` (one model per
zone, per model application) each offer a DAG factory; :class:`ClusterSettings` says where their Ray jobs
run; ``collect`` reads what the workloads wrote; ``defaults`` reads the environment settings of the
shipped DAGs; :data:`RUN_DATE` is the run's day for templated paths, defined also in runs without a
logical date (where ``{{ ds }}`` is not).
"""

from airflow_ray_provider.templates.common import RUN_DATE, RUN_DATE_NODASH, ClusterSettings

__all__ = ["RUN_DATE", "RUN_DATE_NODASH", "ClusterSettings"]

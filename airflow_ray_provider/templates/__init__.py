"""DAG templates, one package per application, and the pieces they share.

``champion_challenger`` (nightly champion-vs-challenger validation) and ``zone_training`` (one model per
zone, per model application) each offer a DAG factory; :class:`ClusterSettings` says where their Ray jobs
run; ``defaults`` reads the environment settings of the shipped DAGs.
"""

from airflow_ray_provider.templates.common import ClusterSettings

__all__ = ["ClusterSettings"]

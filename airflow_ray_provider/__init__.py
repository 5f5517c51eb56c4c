"""Apache Airflow provider for Ray on Kubernetes (KubeRay) and on an ephemeral local Ray head."""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "get_provider_info"]

__version__ = "0.1.0"

_PKG = "airflow_ray_provider"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow's providers manager (the ``apache_airflow_provider`` entry point)."""
    from airflow_ray_provider.connection_forms import KUBERAY_CONNECTION_TYPE, RAY_CONNECTION_TYPE

    return {
        "package-name": "airflow-ray-provider",
        "name": "Ray",
        "description": "Ray on Kubernetes (KubeRay): ephemeral and standing Ray clusters, KubeRay RayJobs, "
        "Ray Job API operators, "
        "sensors and deferrable triggers, model-evaluation and per-zone training workloads.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Ray",
                "external-doc-url": "https://docs.ray.io/",
                "tags": ["software"],
            },
            {
                "integration-name": "KubeRay",
                "external-doc-url": "https://docs.ray.io/en/latest/cluster/kubernetes/",
                "tags": ["software"],
            },
        ],
        "hooks": [
            {"integration-name": "Ray", "python-modules": [f"{_PKG}.hooks.ray_job"]},
            {"integration-name": "KubeRay", "python-modules": [f"{_PKG}.hooks.kuberay"]},
        ],
        "operators": [
            {
                "integration-name": "Ray",
                "python-modules": [
                    f"{_PKG}.operators.ray_job",
                    f"{_PKG}.operators.ephemeral_job",
                    f"{_PKG}.operators.metrics",
                ],
            },
            {
                "integration-name": "KubeRay",
                "python-modules": [
                    f"{_PKG}.operators.ray_cluster",
                    f"{_PKG}.operators.standing_cluster",
                    f"{_PKG}.operators.kuberay_job",
                ],
            },
        ],
        "sensors": [{"integration-name": "Ray", "python-modules": [f"{_PKG}.sensors.ray_job"]}],
        "triggers": [
            {
                "integration-name": "Ray",
                "python-modules": [f"{_PKG}.triggers.ray_job"],
            },
            {
                "integration-name": "KubeRay",
                "python-modules": [f"{_PKG}.triggers.ray_cluster"],
            },
        ],
        "task-decorators": [{"class-name": f"{_PKG}.decorators.ray_task.ray_task", "name": "ray"}],
        "connection-types": [RAY_CONNECTION_TYPE, KUBERAY_CONNECTION_TYPE],
        "extra-links": [f"{_PKG}.operators.job_link.RayJobLink"],
    }

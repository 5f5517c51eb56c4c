"""Apache Airflow provider for Ray on Kubernetes (KubeRay) and on an ephemeral local Ray head."""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "get_provider_info"]

__version__ = "0.1.0"

_PKG = "airflow_ray_provider"
#: The modules Airflow's providers manager lists, per section and integration (paths under the package).
_MODULES = {
    "hooks": {"Ray": ["hooks.ray_job"], "KubeRay": ["hooks.kuberay"]},
    "operators": {
        "Ray": ["operators.ray_job", "templates.collect"],
        "KubeRay": ["operators.ray_cluster", "operators.kuberay_job"],
    },
    "sensors": {"Ray": ["sensors.ray_job"]},
    "triggers": {"Ray": ["triggers.ray_job"], "KubeRay": ["triggers.ray_cluster"]},
}
_DOCS = {"Ray": "https://docs.ray.io/", "KubeRay": "https://docs.ray.io/en/latest/cluster/kubernetes/"}


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow's providers manager (the ``apache_airflow_provider`` entry point)."""
    from airflow_ray_provider.connection_forms import KUBERAY_CONNECTION_TYPE, RAY_CONNECTION_TYPE

    sections = {
        section: [
            {"integration-name": name, "python-modules": [f"{_PKG}.{module}" for module in modules]}
            for name, modules in integrations.items()
        ]
        for section, integrations in _MODULES.items()
    }
    return {
        "package-name": "airflow-ray-provider",
        "name": "Ray",
        "description": "Ray on Kubernetes (KubeRay): ephemeral and standing Ray clusters, KubeRay RayJobs, "
        "Ray Job API operators, sensors and deferrable triggers, model-evaluation and per-zone training "
        "workloads.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": name, "external-doc-url": url, "tags": ["software"]}
            for name, url in _DOCS.items()
        ],
        **sections,
        "task-decorators": [{"class-name": f"{_PKG}.decorators.ray_task.ray_task", "name": "ray"}],
        "connection-types": [RAY_CONNECTION_TYPE, KUBERAY_CONNECTION_TYPE],
        "extra-links": [f"{_PKG}.operators.base.RayJobLink"],
    }

"""Connection forms of the provider's two connection types, as data.

Airflow >= 3.2 builds connection forms from ``conn-fields`` / ``ui-field-behaviour`` in
``get_provider_info()`` without importing the hooks, so this module imports nothing from Airflow: the
providers manager may call ``get_provider_info()`` while Airflow itself is still being imported.
"""

from __future__ import annotations

from typing import Any

DEFAULT_REQUEST_TIMEOUT = 30.0

#: Declarative connection form fields (the ``conn-fields`` of ``get_provider_info``; Airflow >= 3.2).
RAY_CONN_FIELDS: dict[str, dict[str, Any]] = {
    "headers": {
        "label": "Extra HTTP headers (JSON object)",
        "schema": {"type": ["string", "null"]},
        "description": 'e.g. {"X-Org": "ml"}; sent with every Job API call.',
    },
    "cookies": {
        "label": "Cookies (JSON object)",
        "schema": {"type": ["string", "null"], "format": "password"},
        "description": "e.g. an SSO session cookie in front of the dashboard.",
    },
    "verify": {
        "label": "Verify TLS certificate",
        "schema": {"type": ["boolean", "null"], "default": True},
    },
    "ca_bundle": {
        "label": "CA bundle path",
        "schema": {"type": ["string", "null"]},
        "description": "PEM file or folder of CA certificates used to verify the dashboard.",
    },
    "metadata": {
        "label": "Default job metadata (JSON object)",
        "schema": {"type": ["string", "null"]},
    },
    "request_timeout": {
        "label": "Request timeout (seconds)",
        "schema": {"type": ["number", "null"], "default": DEFAULT_REQUEST_TIMEOUT},
    },
}

#: Declarative field behaviour (the ``ui-field-behaviour`` of ``get_provider_info``).
RAY_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["login", "schema", "port"],
    "relabeling": {"host": "Dashboard URL", "password": "Ray auth token"},
    "placeholders": {
        "host": "http://127.0.0.1:8265",
        "password": "token of a cluster with RAY_AUTH_MODE=token (leave empty if auth is off)",
        "headers": '{"X-Org": "ml"}',
        "metadata": '{"team": "ml-platform"}',
    },
}

#: Declarative connection form fields (``conn-fields`` of ``get_provider_info``; Airflow >= 3.2).
KUBERAY_CONN_FIELDS: dict[str, dict[str, Any]] = {
    "in_cluster": {
        "label": "In-cluster configuration",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "kube_config_path": {"label": "Kubeconfig path", "schema": {"type": ["string", "null"]}},
    "kube_config": {
        "label": "Kubeconfig (JSON or YAML)",
        "schema": {"type": ["string", "null"], "format": "password"},
        "description": "An inline kubeconfig; it may hold credentials, so it is stored as a secret.",
    },
    "context": {"label": "Kubeconfig context", "schema": {"type": ["string", "null"]}},
    "namespace": {"label": "Namespace", "schema": {"type": ["string", "null"], "default": "default"}},
    "default_image": {"label": "Default Ray image", "schema": {"type": ["string", "null"]}},
    "dashboard_url_template": {
        "label": "Dashboard URL template",
        "schema": {"type": ["string", "null"]},
        "description": "e.g. http://{service_name}.{namespace}.svc.cluster.local:{dashboard_port} (default) "
        "or https://{name}.ray.example.com for an ingress.",
    },
    "ray_auth": {
        "label": "Ray token auth",
        "schema": {"type": ["string", "null"], "enum": ["auth_options", "secret", "disabled", None]},
        "description": "auth_options (KubeRay >= 1.5.1), secret (older KubeRay) or disabled.",
    },
}
KUBERAY_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["host", "schema", "login", "password", "port"],
    "relabeling": {},
    "placeholders": {"kube_config_path": "~/.kube/config", "namespace": "ray-jobs"},
}


#: The ``connection-types`` entry for ``get_provider_info()`` (declarative UI: Airflow >= 3.2 reads
#: ``conn-fields`` / ``ui-field-behaviour`` from here without importing the hook).
RAY_CONNECTION_TYPE: dict[str, Any] = {
    "connection-type": "ray",
    "hook-class-name": "airflow_ray_provider.hooks.ray_job.RayJobHook",
    "hook-name": "Ray (Job API)",
    "conn-fields": RAY_CONN_FIELDS,
    "ui-field-behaviour": RAY_UI_FIELD_BEHAVIOUR,
}


KUBERAY_CONNECTION_TYPE: dict[str, Any] = {
    "connection-type": "kuberay",
    "hook-class-name": "airflow_ray_provider.hooks.kuberay.KubeRayHook",
    "hook-name": "KubeRay (Kubernetes)",
    "conn-fields": KUBERAY_CONN_FIELDS,
    "ui-field-behaviour": KUBERAY_UI_FIELD_BEHAVIOUR,
}

"""The ``connection-types`` of ``get_provider_info()``, as data: Airflow (>= 3.2) builds each form from
``conn-fields`` and ``ui-field-behaviour`` without importing the hook, and this module imports nothing from
Airflow (the providers manager may call ``get_provider_info()`` while Airflow is still being imported).
"""

from __future__ import annotations

from typing import Any

DEFAULT_REQUEST_TIMEOUT = 30.0

# Airflow 3.3's form (docs/running_in_airflow.md): ``description`` is a field's help text and the only hint
# an empty extra field shows (``placeholders`` reach the standard fields only); a ``default`` is saved into
# every new connection, so only switches carry one; an ``enum`` is a dropdown labelled by ``values_display``.


def _field(label: str, description: str = "", kind: str = "string", **schema: Any) -> dict[str, Any]:
    """One extra field: a nullable ``kind`` with its label, help text and further schema keys."""
    field: dict[str, Any] = {"label": label, "schema": {"type": [kind, "null"], **schema}}
    return {**field, "description": description} if description else field


#: ``ray_auth`` choices and their dropdown labels.
_RAY_AUTH = {
    "auth_options": "auth_options: token auth set by KubeRay (KubeRay >= 1.5.1)",
    "secret": "secret: token in a Secret the provider creates (older KubeRay)",
    "disabled": "disabled: no token auth",
}

RAY_CONNECTION_TYPE: dict[str, Any] = {
    "connection-type": "ray",
    "hook-class-name": "airflow_ray_provider.hooks.ray_job.RayJobHook",
    "hook-name": "Ray (Job API)",
    "conn-fields": {
        "dashboard_url": _field(
            "Dashboard URL for links",
            'The dashboard as a browser reaches it, used by the task\'s "Ray job" link, e.g. '
            "http://localhost:8265 when Host is http://ray-head:8265 inside Docker. Empty: the Host.",
        ),
        "headers": _field(
            "Extra HTTP headers (JSON object)", 'Sent with every Job API call, e.g. {"X-Org": "ml"}.'
        ),
        "cookies": _field(
            "Cookies (JSON object)",
            'e.g. {"session": "..."}: an SSO session cookie in front of the dashboard.',
            format="password",
        ),
        "verify": _field("Verify TLS certificate", kind="boolean", default=True),
        "ca_bundle": _field(
            "CA bundle path",
            "PEM file or folder of CA certificates used to verify the dashboard, "
            "e.g. /etc/ssl/certs/ray-ca.pem.",
        ),
        "metadata": _field(
            "Default job metadata (JSON object)",
            'Added to every job this connection submits, e.g. {"team": "ml-platform"}.',
        ),
        "request_timeout": _field(
            "Request timeout (seconds)",
            f"Per Job API call; empty: {DEFAULT_REQUEST_TIMEOUT:g}.",
            kind="number",
        ),
    },
    "ui-field-behaviour": {
        "hidden-fields": ["login", "schema", "port"],
        "relabeling": {"host": "Dashboard URL", "password": "Ray auth token"},
        "placeholders": {
            "host": "http://127.0.0.1:8265",
            "password": "token of a cluster with RAY_AUTH_MODE=token (leave empty if auth is off)",
        },
    },
}
KUBERAY_CONNECTION_TYPE: dict[str, Any] = {
    "connection-type": "kuberay",
    "hook-class-name": "airflow_ray_provider.hooks.kuberay.KubeRayHook",
    "hook-name": "KubeRay (Kubernetes)",
    "conn-fields": {
        "in_cluster": _field(
            "In-cluster configuration",
            "Use the service account of the pod Airflow runs in.",
            kind="boolean",
            default=False,
        ),
        "kube_config_path": _field(
            "Kubeconfig path",
            "A kubeconfig file on the Airflow workers and triggerer, e.g. ~/.kube/config.",
            examples=["~/.kube/config"],
        ),
        "kube_config": _field(
            "Kubeconfig (JSON or YAML)",
            "An inline kubeconfig, pasted as is (YAML keeps its newlines). It is stored in the "
            "connection's Extra, encrypted with the Fernet key; for credentials prefer a kubeconfig path, "
            "in-cluster configuration or a secrets backend.",
            format="multiline",
        ),
        "context": _field("Kubeconfig context", "Empty: the kubeconfig's current context."),
        "namespace": _field("Namespace", 'Namespace of the RayClusters, e.g. ray-jobs; empty: "default".'),
        "default_image": _field(
            "Default Ray image", "Used when a cluster spec names no image, e.g. rayproject/ray:2.60.0-py311."
        ),
        "dashboard_url_template": _field(
            "Dashboard URL template",
            "How Airflow reaches a head's dashboard: "
            "http://{service_name}.{namespace}.svc.cluster.local:{dashboard_port} (default) "
            "or https://{name}.ray.example.com for an ingress.",
        ),
        "link_url_template": _field(
            "Dashboard URL for people",
            "Where a browser reaches a cluster's dashboard (the Ray job link), e.g. "
            "https://ray.example.com/{namespace}/{name}; empty: the address Airflow uses.",
        ),
        "ray_auth": _field(
            "Ray token auth", "Empty: auth_options.", enum=list(_RAY_AUTH), values_display=dict(_RAY_AUTH)
        ),
    },
    "ui-field-behaviour": {"hidden-fields": ["host", "schema", "login", "password", "port"]},
}

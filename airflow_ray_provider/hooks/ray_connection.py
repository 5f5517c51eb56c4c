"""The ``ray`` connection type and the cluster handle, reduced to one :class:`RayApiConfig`.

A ``ray`` connection holds:

* **Host**: the dashboard URL, e.g. ``http://ray-head:8265`` (or a host name with Schema ``https``
  and Port ``8265``);
* **Password**: the Ray auth token (sent as ``Authorization: Bearer <token>``);
* **Extra** (JSON): ``dashboard_url`` (the dashboard as a browser reaches it, for the "Ray job" link,
  when Host is an address only Airflow can reach, e.g. ``http://ray-head:8265`` inside Docker),
  ``headers`` and ``cookies`` (objects, or JSON text), ``verify`` (bool, default
  ``true``), ``ca_bundle`` (path of a CA bundle; implies verification against it), ``metadata``
  (default job metadata), ``request_timeout`` (seconds per HTTP call, default 30).

Secrets (token, cookie values, credential-bearing headers) are registered with Airflow's secrets
masker as soon as they are read, are excluded from ``repr``, and are never put into trigger kwargs,
XCom or exception messages: triggers carry the connection id or the cluster handle and resolve the
token themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.connection_forms import DEFAULT_REQUEST_TIMEOUT
from airflow_ray_provider.connection_forms import RAY_CONN_FIELDS as CONN_FIELDS
from airflow_ray_provider.connection_forms import RAY_UI_FIELD_BEHAVIOUR as UI_FIELD_BEHAVIOUR
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.ray_api import SENSITIVE_HEADERS, build_headers

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_ray_provider.clusters.handle import RayClusterHandle

DEFAULT_SECRET_KEY = "auth_token"


@dataclass(frozen=True)
class RayApiConfig:
    """Everything needed to call one cluster's Job API. Secrets are kept out of ``repr``.

    :param dashboard_url: base URL of the dashboard, without a trailing slash.
    :param source: where it came from (``"connection 'ray_default'"``), for error messages.
    :param token: the Ray auth token, or ``None`` when auth is off.
    :param headers: extra HTTP headers.
    :param cookies: cookies.
    :param verify: TLS verification: ``True``, ``False`` or a CA bundle path.
    :param metadata: default job metadata.
    :param request_timeout: seconds per HTTP call.
    :param link_url: the dashboard as a browser reaches it (``None``: ``dashboard_url``).
    """

    dashboard_url: str
    source: str
    token: str | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    cookies: dict[str, str] = field(default_factory=dict, repr=False)
    verify: bool | str = True
    metadata: dict[str, str] = field(default_factory=dict)
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    link_url: str | None = None

    @property
    def browser_url(self) -> str:
        """The dashboard URL for people (extra links): ``link_url``, else the API's ``dashboard_url``."""
        return self.link_url or self.dashboard_url

    def request_headers(self) -> dict[str, str]:
        """Headers for every call, ``Authorization`` included."""
        return build_headers(self.token, self.headers)

    def secrets(self) -> list[str]:
        """Every secret value in this config (for the secrets masker)."""
        values = [self.token] if self.token else []
        values += [v for v in self.cookies.values() if v]
        values += [v for k, v in self.headers.items() if k.lower() in SENSITIVE_HEADERS and v]
        return values


def _json_object(value: Any, name: str, source: str) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise RayInvalidInputError(f"{source}: extra '{name}' is not valid JSON") from exc
    if not isinstance(value, dict):
        raise RayInvalidInputError(f"{source}: extra '{name}' must be a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def _dashboard_url(conn: Connection, source: str) -> str:
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        raise RayInvalidInputError(
            f"{source} has no Host; set it to the dashboard URL, e.g. http://head:8265"
        )
    if "://" in host:
        return host
    scheme = conn.schema or "http"
    return f"{scheme}://{host}:{conn.port}" if conn.port else f"{scheme}://{host}"


def _link_url(value: Any, source: str) -> str | None:
    url = str(value or "").strip().rstrip("/")
    if url and not url.startswith(("http://", "https://")):
        raise RayInvalidInputError(
            f"{source}: extra 'dashboard_url' must start with http:// or https://, got {url!r}"
        )
    return url or None


def _verify(extra: dict[str, Any]) -> bool | str:
    if extra.get("ca_bundle"):
        return str(extra["ca_bundle"])
    verify = extra.get("verify", True)
    if isinstance(verify, str):
        return verify.strip().lower() not in ("false", "0", "no", "off")
    return bool(verify)


def config_from_connection(conn: Connection) -> RayApiConfig:
    """Build the config of a ``ray`` connection.

    :raises RayInvalidInputError: for a missing host or malformed extras.
    """
    source = f"connection {conn.conn_id!r}"
    extra = conn.extra_dejson or {}
    return RayApiConfig(
        dashboard_url=_dashboard_url(conn, source),
        source=source,
        token=conn.password or None,
        headers=_json_object(extra.get("headers"), "headers", source),
        cookies=_json_object(extra.get("cookies"), "cookies", source),
        verify=_verify(extra),
        metadata=_json_object(extra.get("metadata"), "metadata", source),
        request_timeout=float(extra.get("request_timeout") or DEFAULT_REQUEST_TIMEOUT),
        link_url=_link_url(extra.get("dashboard_url"), source),
    )


def read_handle_token(handle: RayClusterHandle) -> str | None:
    """Resolve the token a cluster handle refers to (sync I/O: a file or a Kubernetes Secret).

    :returns: the token, or ``None`` when the cluster has no auth.
    """
    if handle.auth_token_file:
        from airflow_ray_provider.local.head import read_token

        return read_token(handle.auth_token_file)
    if handle.auth_token_secret:
        from airflow_ray_provider.hooks.kuberay import KubeRayHook

        hook = KubeRayHook(kuberay_conn_id=handle.conn_id) if handle.conn_id else KubeRayHook()
        return hook.read_auth_token(
            secret_name=handle.auth_token_secret,
            namespace=handle.namespace,
            key=handle.auth_token_secret_key or DEFAULT_SECRET_KEY,
        )
    return None


def config_from_handle(handle: RayClusterHandle, token: str | None) -> RayApiConfig:
    """Build the config of a cluster handle (the create-cluster task's XCom)."""
    return RayApiConfig(
        dashboard_url=handle.dashboard_url.rstrip("/"),
        source=f"cluster handle {handle.name!r} ({handle.backend})",
        token=token,
        link_url=handle.link_url if handle.link_url != handle.dashboard_url else None,
    )


__all__ = ["CONN_FIELDS", "DEFAULT_REQUEST_TIMEOUT", "UI_FIELD_BEHAVIOUR", "RayApiConfig"]

"""``RayJobHook``: a ``ray`` connection (the dashboard URL as Host, the Ray auth token as Password, the Extra
of :mod:`..connection_forms`, or a ``pool``) as the provider's one Job API client, its secrets masked as
soon as read; the run target a task's arguments, or a deferred run's reference, mean; and how a job's log
lines go into a task log (the operators' and the trigger's)."""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_ray_provider.clusters import ClusterRequest, RayClusterHandle, TaskIdentity
from airflow_ray_provider.connection_forms import DEFAULT_REQUEST_TIMEOUT
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import (
    backend_for_connection,
    backend_for_handle,
    rayjobs_for_connection,
)
from airflow_ray_provider.jobs.client import JobClient
from airflow_ray_provider.launch import (
    ClusterTarget,
    PoolLease,
    PoolOptions,
    RayJobTarget,
    cluster_target,
    pool_options,
)

if TYPE_CHECKING:
    from airflow.sdk import Connection


#: Prefix of every streamed job-log line in the task log.
LOG_PREFIX = "[ray job] "


def emit_lines(log: Any, lines: list[str]) -> None:
    """Write job-log lines into the task log, one record per line, each through the secrets masker (also
    where no masking log processor is configured: ``dag.test()``, a bare triggerer test)."""
    from airflow.sdk.log import redact

    for line in lines:
        log.info("%s%s", LOG_PREFIX, redact(line))


def _json_extra(extra: dict[str, Any], name: str, source: str) -> dict[str, Any] | None:
    """An extra that holds a JSON object (or its text); ``None`` when empty."""
    value = extra.get(name)
    if value in (None, ""):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise RayInvalidInputError(f"{source}: extra '{name}' is not valid JSON") from exc
    if not isinstance(value, dict):
        raise RayInvalidInputError(f"{source}: extra '{name}' must be a JSON object")
    return value


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


def connection_link_url(conn: Connection) -> str:
    """The dashboard of a ``ray`` connection as a browser reaches it: its ``dashboard_url`` extra, else Host.

    :raises RayInvalidInputError: for an extra that is not an http(s) URL.
    """
    source = f"connection {conn.conn_id!r}"
    url = str((conn.extra_dejson or {}).get("dashboard_url") or "").strip().rstrip("/")
    if url and not url.startswith(("http://", "https://")):
        raise RayInvalidInputError(
            f"{source}: extra 'dashboard_url' must start with http:// or https://, got {url!r}"
        )
    return url or _dashboard_url(conn, source)


class RayJobHook(BaseHook):
    """The Ray Job API of a ``ray`` connection; ``__init__`` does no I/O (a cluster handle's client is its
    backend's: :func:`target_from_ref`).

    :param retry_attempts: attempts per API call on transient failures (1 = no retry).
    :param retry_max_wait: longest back-off between attempts, in seconds.
    """

    conn_name_attr = "ray_conn_id"
    default_conn_name = "ray_default"
    conn_type = "ray"
    hook_name = "Ray (Job API)"

    def __init__(
        self,
        ray_conn_id: str = default_conn_name,
        *,
        retry_attempts: int = 5,
        retry_max_wait: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ray_conn_id = ray_conn_id
        self.retry_attempts = retry_attempts
        self.retry_max_wait = retry_max_wait

    @cached_property
    def connection(self) -> Connection:
        """The ``ray`` connection; a missing one is a :class:`RayInvalidInputError` saying what to create."""
        from airflow.exceptions import AirflowNotFoundException

        try:
            return self.get_connection(self.ray_conn_id)
        except AirflowNotFoundException as exc:
            raise RayInvalidInputError(
                f"connection {self.ray_conn_id!r} is not defined; create a `ray` connection with the "
                "dashboard URL as Host and the Ray auth token as Password"
            ) from exc

    @cached_property
    def client(self) -> JobClient:
        """The Job API client, its credentials registered with Airflow's secrets masker.

        :raises RayInvalidInputError: for a missing host or malformed extras, naming the connection.
        """
        from airflow.sdk.log import mask_secret

        conn, source = self.connection, f"connection {self.ray_conn_id!r}"
        extra = conn.extra_dejson or {}
        texts = {
            name: {str(key): str(value) for key, value in (_json_extra(extra, name, source) or {}).items()}
            for name in ("headers", "cookies", "metadata")
        }
        verify = extra.get("verify", True)
        if isinstance(verify, str):
            verify = verify.strip().lower() not in ("false", "0", "no", "off")
        client = JobClient(
            _dashboard_url(conn, source), token=conn.password or None, source=source, conn_id=conn.conn_id,
            verify=str(extra["ca_bundle"]) if extra.get("ca_bundle") else bool(verify),
            timeout=float(extra.get("request_timeout") or DEFAULT_REQUEST_TIMEOUT),
            retry_attempts=self.retry_attempts, retry_max_wait=self.retry_max_wait, **texts,
        )  # fmt: skip
        for secret in client.secrets():
            mask_secret(secret)
        return client

    def test_connection(self) -> tuple[bool, str]:
        """Check the connection from the Airflow UI: ``GET /api/version`` with the token."""
        try:
            return True, f"Connected to Ray {self.client.version()} at {self.client.address}"
        except Exception as exc:
            return False, str(exc)


def check_target_arguments(cluster: Any, ray_conn_id: str | None) -> None:
    """Reject both a cluster handle and a connection id (checked again after templating)."""
    if cluster is not None and ray_conn_id:
        raise RayInvalidInputError("pass either cluster (a cluster handle) or ray_conn_id, not both")


def job_api_target(
    cluster: Any,
    ray_conn_id: str | None,
    *,
    identity: TaskIdentity | None = None,
    poll_interval: float | None = None,
    retry_attempts: int = 5,
) -> ClusterTarget:
    """The Job API target of a task with ``cluster`` (a handle) or ``ray_conn_id`` (default
    ``ray_default``); nothing is called yet. A ``ray`` connection whose extra holds ``pool`` (the pool's
    fields, its prices by default the connection's ``prices`` extra, and where its cluster is made:
    ``cluster_conn_id``, ``cluster_spec``, ``local_options``, ``namespace``; a local head by default) runs
    on the pool's cluster, leased for ``identity``'s task instance.

    :raises RayInvalidInputError: for both, a malformed handle, or a malformed pool.
    """
    check_target_arguments(cluster, ray_conn_id)
    if cluster is not None:
        return target_from_ref({"handle": cluster, "retry_attempts": retry_attempts})  # malformed: refused
    hook = RayJobHook(ray_conn_id or RayJobHook.default_conn_name, retry_attempts=retry_attempts)
    extra, source = hook.connection.extra_dejson or {}, f"connection {hook.ray_conn_id!r}"  # read once, here
    pool = _json_extra(extra, "pool", source)
    if pool is not None and identity is not None:
        made = ("cluster_conn_id", "cluster_spec", "local_options", "namespace")  # the rest: the pool's
        where = {key: pool.pop(key) for key in made if key in pool}
        pool.setdefault("prices", extra.get("prices"))
        try:
            return own_cluster_target(
                identity, **where, pool=pool, poll_interval=poll_interval, ray_conn_id=hook.ray_conn_id,
                retry_attempts=retry_attempts,
            )  # fmt: skip
        except RayInvalidInputError as exc:
            raise RayInvalidInputError(f"{source} extra 'pool': {exc}") from exc
    ref = {"ray_conn_id": hook.ray_conn_id, "retry_attempts": retry_attempts}
    return ClusterTarget(client=hook.client, dashboard_url=connection_link_url(hook.connection), face_ref=ref)


def own_cluster_target(
    identity: TaskIdentity,
    *,
    cluster_conn_id: str | None = None,
    cluster_spec: Any = None,
    local_options: Any = None,
    pool: PoolOptions | dict[str, Any] | None = None,
    poll_interval: float | None = None,
    ray_conn_id: str | None = None,
    retry_attempts: int = 5,
    **request: Any,
) -> ClusterTarget:
    """A cluster the run creates through ``cluster_conn_id``'s backend (a local head by default), or with
    ``pool`` the pool's; every check here, no API call (the run creates or leases it).

    :param request: the other :class:`~airflow_ray_provider.clusters.ClusterRequest` fields
        (``manifest``, ``namespace``, ``name_prefix``, ``expiry``) and :class:`ClusterTarget`'s timeouts.
    :raises RayInvalidInputError: naming the field.
    """
    timeouts = {key: request.pop(key) for key in ("ready_timeout", "delete_timeout") if key in request}
    ref = {"cluster_conn_id": cluster_conn_id, "retry_attempts": retry_attempts, "ray_conn_id": ray_conn_id}
    options = pool_options(pool, poll_interval)
    cluster = ClusterRequest.from_arguments(spec=cluster_spec, local_options=local_options, **request)
    backend = backend_for_connection(cluster_conn_id, namespace=request.get("namespace"))
    return cluster_target(backend, cluster, identity, options, face_ref=ref, retry_attempts=retry_attempts,
                          **timeouts)  # fmt: skip


def target_from_ref(ref: dict[str, Any]) -> Any:
    """The run target a reference names (a run's ``state["target"]``; blocking: connections are read).

    ``{"ray_conn_id"}``: a ``ray`` connection; ``{"handle", "owned", "cluster_conn_id"}``: a cluster
    handle (owned: the run created it and deletes it); ``{"rayjob", "namespace", "cluster_conn_id", ...}``:
    a KubeRay RayJob (``RayJobTarget.ref``); with ``{"pool", "holder"}``: a pool's cluster, whose lease the
    target renews and releases.
    """
    attempts = int(ref.get("retry_attempts") or 5)
    if ref.get("rayjob"):
        jobs = rayjobs_for_connection(ref.get("cluster_conn_id"), namespace=ref.get("namespace"))
        return RayJobTarget.from_ref(jobs, ref)
    if ref.get("handle") is None:
        return job_api_target(None, ref["ray_conn_id"], retry_attempts=attempts)
    handle = RayClusterHandle.from_dict(ref["handle"])
    backend = backend_for_handle(handle, conn_id=ref.get("cluster_conn_id"))
    pool = ref.get("pool")
    lease = PoolLease(backend, PoolOptions(**pool), ref["holder"], held=True) if pool else None
    base = {k: v for k, v in ref.items() if k not in ("handle", "owned", "pool", "holder")}
    return ClusterTarget(handle=handle, backend=backend, owned=bool(ref.get("owned")), face_ref=base,
                         pool=lease, retry_attempts=attempts)  # fmt: skip

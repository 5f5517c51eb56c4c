"""Which run target a task's arguments mean, and a deferred run's reference: decided here only.

A run's target is made here from the task's arguments (a ``ray`` connection, a cluster handle), and again
from the JSON reference a deferred run carries (:func:`target_from_ref`), so the trigger and
``execute_complete`` reach the same cluster, with the token read where they run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from airflow_ray_provider.clusters.handle import InvalidClusterHandleError, RayClusterHandle
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.kuberay import backend_for_handle, rayjobs_for_connection
from airflow_ray_provider.hooks.ray_job import RayJobHook, handle_client
from airflow_ray_provider.launch import ClusterTarget


def check_target_arguments(cluster: Any, ray_conn_id: str | None) -> None:
    """Reject both a cluster handle and a connection id (checked again after templating)."""
    if cluster is not None and ray_conn_id:
        raise RayInvalidInputError("pass either cluster (a cluster handle) or ray_conn_id, not both")


def job_api_target(cluster: Any, ray_conn_id: str | None, *, retry_attempts: int = 5) -> ClusterTarget:
    """The Job API target of a task with ``cluster`` (a handle) or ``ray_conn_id`` (default
    ``ray_default``); nothing is called yet.

    :raises RayInvalidInputError: for both, or a malformed handle.
    """
    check_target_arguments(cluster, ray_conn_id)
    if cluster is None:
        return target_from_ref({"ray_conn_id": ray_conn_id or RayJobHook.default_conn_name,
                                "retry_attempts": retry_attempts})  # fmt: skip
    try:
        handle = RayClusterHandle.from_dict(cluster)
    except InvalidClusterHandleError as exc:
        raise RayInvalidInputError(str(exc)) from exc
    return target_from_ref({"handle": handle.to_dict(), "retry_attempts": retry_attempts})


def target_from_ref(ref: dict[str, Any]) -> Any:
    """The run target a reference names (a run's ``state["target"]``; blocking: connections are read).

    ``{"ray_conn_id"}``: a ``ray`` connection; ``{"handle", "owned", "cluster_conn_id"}``: a cluster
    handle (owned: the run created it and deletes it); ``{"rayjob", "namespace", "cluster_conn_id",
    "template", "suspend_on_kill"}``: a KubeRay RayJob.
    """
    from airflow_ray_provider.clusters import RayJobPlan
    from airflow_ray_provider.launch import RayJobTarget

    options: dict[str, Any] = {"retry_attempts": int(ref.get("retry_attempts") or 5)}
    if ref.get("rayjob"):
        jobs = rayjobs_for_connection(ref.get("cluster_conn_id"), namespace=ref.get("namespace"))
        plan = RayJobPlan(name=ref["rayjob"], namespace=jobs.settings.namespace,
                          dashboard_url_template=ref.get("template"))  # fmt: skip
        connect = partial(handle_client, retry_attempts=2, retry_max_wait=1.0)
        wait = float(ref.get("teardown_wait") or 0.0)
        return RayJobTarget(jobs, plan, suspend_on_kill=bool(ref.get("suspend_on_kill")), teardown_wait=wait,
                            ref=ref, connect=connect)  # fmt: skip
    base = {k: v for k, v in ref.items() if k not in ("handle", "owned")}
    if ref.get("handle"):
        handle = RayClusterHandle.from_dict(ref["handle"])
        conn_id = ref.get("cluster_conn_id")
        return ClusterTarget(handle=handle, backend=backend_for_handle(handle, conn_id=conn_id),
                             owned=bool(ref.get("owned")), ref=base,
                             connect=partial(handle_client, conn_id=conn_id, **options))  # fmt: skip
    hook = RayJobHook(ref["ray_conn_id"], **options)
    return ClusterTarget(client=hook.client, link_url=hook.link_url, ref=base)

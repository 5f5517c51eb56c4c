"""``KubeRayJobTrigger``: wait for a KubeRay RayJob in the triggerer, streaming its Ray job's log.

Every look at the RayJob (Kubernetes API, blocking client) runs in a worker thread; the log comes
through the cluster's dashboard with aiohttp, the token resolved here from the cluster's Secret (never
serialised). Any failure becomes an ``error`` event. When a user kills the deferred task, the RayJob is
deleted or suspended as the operator was told.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ray_provider.hooks.cluster_backend import arayjobs_for_connection
from airflow_ray_provider.hooks.ray_job import RayJobHook, emit_lines
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES, new_log_lines, tail

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import KubeRayJobs, RayJobLook

EVENT_DONE, EVENT_ERROR = "done", "error"


class KubeRayJobTrigger(BaseTrigger):
    """Look at a RayJob until KubeRay is done with it (``Complete`` or ``Failed``), then fire one event.

    Event: ``{"status": "done" | "error", "name", "rayjob": RayJobStatus dict or None, "dashboard_url",
    "log_offset", "log_tail", "message"}``.

    :param conn_id: the ``kuberay`` connection.
    :param namespace: the RayJob's namespace.
    :param name: the RayJob's name.
    :param dashboard_url_template: how its cluster's dashboard is reached (``None``: the connection's).
    :param poll_interval: seconds between looks.
    :param log_offset: characters of the job's log already written to the task log.
    :param stream_logs: write new log lines into the task log.
    :param on_kill: ``delete``, ``suspend`` or ``none``: what a user's kill does to the RayJob.
    :param log_tail_lines: lines of the log a failure event carries.
    """

    def __init__(
        self,
        *,
        conn_id: str | None,
        namespace: str,
        name: str,
        dashboard_url_template: str | None = None,
        poll_interval: float = 5.0,
        log_offset: int = 0,
        stream_logs: bool = True,
        on_kill: str = "delete",
        log_tail_lines: int = DEFAULT_TAIL_LINES,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.namespace = namespace
        self.name = name
        self.dashboard_url_template = dashboard_url_template
        self.poll_interval = float(poll_interval)
        self.log_offset = int(log_offset)
        self.stream_logs = stream_logs
        self.on_kill_action = on_kill
        self.log_tail_lines = log_tail_lines

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and every constructor argument (no secrets)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "namespace": self.namespace,
                "name": self.name,
                "dashboard_url_template": self.dashboard_url_template,
                "poll_interval": self.poll_interval,
                "log_offset": self.log_offset,
                "stream_logs": self.stream_logs,
                "on_kill": self.on_kill_action,
                "log_tail_lines": self.log_tail_lines,
            },
        )

    def _event(self, status: str, look: RayJobLook | None, **fields: Any) -> TriggerEvent:
        payload = {
            "status": status, "name": self.name, "rayjob": look.status.to_dict() if look else None,
            "dashboard_url": look.cluster.dashboard_url if look and look.cluster else None,
            "log_offset": self.log_offset, "log_tail": "", "message": "", **fields,
        }  # fmt: skip
        return TriggerEvent(payload)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Look until the RayJob is final; stream the log while its dashboard answers."""
        jobs: KubeRayJobs | None = None
        hook: RayJobHook | None = None
        text = ""
        try:
            jobs = await arayjobs_for_connection(self.conn_id, namespace=self.namespace)
            while True:
                look = await asyncio.to_thread(
                    jobs.look, self.name, namespace=self.namespace, template=self.dashboard_url_template
                )
                if look.cluster is not None and (hook is None or hook.cluster != look.cluster):
                    if hook is not None:
                        await hook.aclose()
                    hook = RayJobHook(
                        None, cluster=look.cluster.to_dict(), retry_attempts=2, retry_max_wait=1.0
                    )
                if hook is not None and self.stream_logs and look.status.job_id:
                    text = await self._stream(hook, look, text)
                if look.status.is_final:
                    log_tail = "" if look.status.is_success else tail(text, self.log_tail_lines)
                    # Its cluster may be gone already (TTL 0): report the dashboard last seen.
                    seen = look.cluster or (hook.cluster if hook is not None else None)
                    url = seen.dashboard_url if seen is not None else None
                    yield self._event(EVENT_DONE, look, log_tail=log_tail, dashboard_url=url)
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # an event, never an exception: execute_complete explains it
            self.log.warning("Waiting for RayJob %s/%s failed: %s", self.namespace, self.name, exc)
            yield self._event(EVENT_ERROR, None, message=f"{type(exc).__name__}: {exc}")
        finally:
            if hook is not None:
                await hook.aclose()
            if jobs is not None:
                await asyncio.to_thread(jobs.close)

    async def _stream(self, hook: RayJobHook, look: RayJobLook, text: str) -> str:
        try:
            text = await hook.aget_job_logs(look.status.job_id)
        except Exception as exc:  # not submitted yet, or its cluster going away: keep what we have
            self.log.debug("No log of Ray job %s yet: %s", look.status.job_id, exc)
            return text
        lines, self.log_offset = new_log_lines(text, self.log_offset, final=look.status.is_final)
        emit_lines(self.log, lines)
        return text

    async def on_kill(self) -> None:
        """A user killed the deferred task: delete or suspend the RayJob, as the operator was told."""
        if self.on_kill_action == "none":
            return
        jobs = await arayjobs_for_connection(self.conn_id, namespace=self.namespace)
        try:
            if self.on_kill_action == "suspend":
                await asyncio.to_thread(jobs.suspend, self.name, namespace=self.namespace)
            else:
                await asyncio.to_thread(jobs.delete, self.name, namespace=self.namespace)
            self.log.info("RayJob %s/%s: %s on task kill", self.namespace, self.name, self.on_kill_action)
        finally:
            await asyncio.to_thread(jobs.close)

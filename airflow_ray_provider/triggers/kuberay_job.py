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
from airflow_ray_provider.jobs.events import RayJobDone, RayJobWaitFailed
from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES, tail
from airflow_ray_provider.launch import (
    Cleanup,
    Ending,
    RayJobUsagePlan,
    RayJobWatch,
    actions_for,
    await_rayjob,
    rayjob_plan,
)

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import KubeRayJobs, RayClusterHandle, RayJobLook

#: What a killed task does to its RayJob: KubeRay's own verbs (``suspend`` pauses it for the next try).
KILL_VERBS = ("delete", "suspend", "none")


def cluster_hook(cluster: RayClusterHandle) -> RayJobHook:
    """The Job API hook of a RayJob's cluster (few, short retries: the cluster may be going away)."""
    return RayJobHook(None, cluster=cluster.to_dict(), retry_attempts=2, retry_max_wait=1.0)


def kill_verb(cleanup: Cleanup, on_kill: str | None, ending: Ending) -> str:
    """What a kill does to the RayJob: ``delete``, ``suspend`` (when ``on_kill="suspend"``) or ``none``."""
    if not actions_for(cleanup, ending).stop_job:
        return "none"
    return "suspend" if on_kill == "suspend" else "delete"


class KubeRayJobTrigger(BaseTrigger):
    """Look at a RayJob until KubeRay is done with it (``Complete`` or ``Failed``), then fire one event.

    A shell over :func:`airflow_ray_provider.launch.await_rayjob`; the event is a
    :class:`~airflow_ray_provider.jobs.events.RayJobDone` or
    :class:`~airflow_ray_provider.jobs.events.RayJobWaitFailed`.

    :param conn_id: the ``kuberay`` connection.
    :param namespace: the RayJob's namespace.
    :param name: the RayJob's name.
    :param dashboard_url_template: how its cluster's dashboard is reached (``None``: the connection's).
    :param poll_interval: seconds between looks.
    :param log_offset: characters of the job's log already written to the task log.
    :param stream_logs: write new log lines into the task log.
    :param on_kill: ``delete``, ``suspend`` or ``none``: what a user's kill does to the RayJob (``none``
        wins over ``cleanup_policy``; ``suspend`` replaces deleting).
    :param log_tail_lines: lines of the log a failure event carries.
    :param cleanup_policy: ``never``, ``on_exception`` or ``always`` (docs/launch.md, "Cleanup").
    :param usage: the usage record's plan (``RayJobUsagePlan.to_dict()``; ``None``: no record); the
        record rides in the event.
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
        cleanup_policy: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.usage = usage
        #: The wait's state (the last look, the cluster's client, the record), for a kill's record.
        self._watch: RayJobWatch | None = None
        self.conn_id = conn_id
        self.namespace = namespace
        self.name = name
        self.dashboard_url_template = dashboard_url_template
        self.poll_interval = float(poll_interval)
        self.log_offset = int(log_offset)
        self.stream_logs = stream_logs
        self.on_kill_action = on_kill
        self.log_tail_lines = log_tail_lines
        self.cleanup_policy = (
            Cleanup.parse(cleanup_policy, field_name="cleanup_policy")
            if cleanup_policy is not None
            else Cleanup.NEVER
            if on_kill == "none"
            else Cleanup.ALWAYS
        )

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
                "cleanup_policy": self.cleanup_policy.value,
                "usage": self.usage,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Look until the RayJob is final; stream the log while its dashboard answers."""
        jobs: KubeRayJobs | None = None
        watch = self._watch = self._new_watch()
        try:
            jobs = await arayjobs_for_connection(self.conn_id, namespace=self.namespace)

            async def look() -> RayJobLook | None:
                assert jobs is not None
                template = self.dashboard_url_template
                seen = await asyncio.to_thread(
                    watch.look, jobs, self.name, namespace=self.namespace, template=template
                )
                while watch.retired:  # the client of a cluster a retry replaced
                    await watch.retired.pop().aclose()
                return seen

            async with watch.asampling(self.poll_interval):  # busy CPU between looks when far apart
                outcome = await await_rayjob(
                    rayjob_plan(log_offset=self.log_offset, stream_logs=self.stream_logs),
                    look=look,
                    read_logs=watch.aread,
                    emit=lambda lines: emit_lines(self.log, lines),
                    poll_interval=self.poll_interval,
                )
            self.log_offset = outcome.plan.log_offset
            final = outcome.seen.subject
            if final is None:
                message = f"RayJob {self.namespace}/{self.name} was deleted while the task waited for it"
                yield TriggerEvent(RayJobWaitFailed(self.name, message, self.log_offset).to_payload())
                return
            await watch.auntil_cluster_gone(final, look, self.poll_interval)
            log_tail = "" if final.status.is_success else tail(watch.text, self.log_tail_lines)
            seen_cluster = watch.cluster(final)
            url = seen_cluster.dashboard_url if seen_cluster is not None else None
            done = RayJobDone(self.name, final.status.to_dict(), url, self.log_offset, log_tail, watch.record)
            yield TriggerEvent(done.to_payload())
        except Exception as exc:  # an event, never an exception: execute_complete explains it
            self.log.warning("Waiting for RayJob %s/%s failed: %s", self.namespace, self.name, exc)
            failed = RayJobWaitFailed(self.name, f"{type(exc).__name__}: {exc}", self.log_offset)
            yield TriggerEvent(failed.to_payload())
        finally:
            if watch.client is not None:
                await watch.client.aclose()
            if jobs is not None:
                await asyncio.to_thread(jobs.close)

    def _new_watch(self) -> RayJobWatch:
        return RayJobWatch(self.log, cluster_hook, RayJobUsagePlan.from_dict(self.usage))

    async def on_kill(self) -> None:
        """A user killed the deferred task: make the usage record (``ended_by: killed``, logged: no
        ``execute_complete`` runs to publish it), then delete or suspend the RayJob as the cleanup table
        says."""
        verb = kill_verb(self.cleanup_policy, self.on_kill_action, Ending.USER_KILL)
        jobs = await arayjobs_for_connection(self.conn_id, namespace=self.namespace)
        try:
            await self._record_on_kill(jobs)
            if verb == "none":
                return
            if verb == "suspend":
                await asyncio.to_thread(jobs.suspend, self.name, namespace=self.namespace)
            else:
                await asyncio.to_thread(jobs.delete, self.name, namespace=self.namespace)
            self.log.info("RayJob %s/%s: %s on task kill", self.namespace, self.name, verb)
        finally:
            await asyncio.to_thread(jobs.close)

    async def _record_on_kill(self, jobs: KubeRayJobs) -> None:
        """The record of what could be read now, before the RayJob goes; its line into the log. Best
        effort: a look or a read that fails is logged, never raised."""
        from airflow_ray_provider.launch.usage import UsageRecord

        if self.usage is None:
            return
        watch = self._watch
        try:
            if watch is None or watch.last is None or watch.client is None:  # killed before a look
                watch = self._watch = self._new_watch()
                look = await asyncio.to_thread(
                    jobs.look, self.name, namespace=self.namespace, template=self.dashboard_url_template
                )
                watch.seen(look)
            if not watch.record and watch.last is not None and watch.last.status.job_id:
                await asyncio.to_thread(watch.collect_usage, watch.last, "killed")
        except Exception as exc:
            self.log.warning("No usage record of RayJob %s/%s on kill: %s", self.namespace, self.name, exc)
            return
        record = watch.record
        if not record:
            self.log.info("No usage record of RayJob %s/%s on kill: no Ray job", self.namespace, self.name)
            return
        self.log.info(
            "Usage of Ray job %s (task killed while deferred): %s",
            record.get("submission_id"),
            UsageRecord.from_dict(record).line(),
        )
        for name, why in sorted((record.get("not_available") or {}).items()):
            self.log.info("Usage record: %s not available: %s", name, why)

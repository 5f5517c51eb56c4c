"""``RayJobTrigger``: wait for a Ray job in the triggerer, streaming its log, without importing ``ray``.

It serialises every argument and no secret: the token is resolved in the triggerer from the ``ray``
connection or the cluster handle. Every poll is non-blocking (aiohttp); any failure becomes an
``error`` event instead of an exception; ``job_timeout`` is measured from the serialised
``start_time``, so it survives deferrals and triggerer restarts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, nullcontext
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ray_provider.hooks.ray_job import RayJobHook, emit_lines
from airflow_ray_provider.jobs.events import JobWaitFailed
from airflow_ray_provider.launch import Cleanup, Ending, WaitPlan, actions_for, await_job, event_for

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayClusterHandle
    from airflow_ray_provider.launch.usage import BusyLedger


def legacy_cleanup(stop_on_timeout: bool | None, stop_on_cancel: bool | None) -> Cleanup | None:
    """The cleanup of a trigger serialised by an earlier release (``stop_on_timeout``, ``stop_on_cancel``)."""
    if stop_on_timeout is None and stop_on_cancel is None:
        return None
    return Cleanup.ON_EXCEPTION if stop_on_cancel is not False else Cleanup.NEVER


class RayJobTrigger(BaseTrigger):
    """Poll a Ray job until it finishes or times out, then fire one event.

    It is a shell over :func:`airflow_ray_provider.launch.await_job` (the wait's one step function); the
    event is one of :mod:`airflow_ray_provider.jobs.events` (``JobDone``, ``JobTimedOut``, ``JobWaitFailed``).

    :param submission_id: the job to wait for.
    :param ray_conn_id: the ``ray`` connection (when no ``cluster`` is given).
    :param cluster: a cluster handle dict (takes precedence over ``ray_conn_id``).
    :param poll_interval: seconds between polls.
    :param timeout: seconds after ``start_time`` before giving up; ``None`` waits for ever.
    :param start_time: epoch seconds the timeout counts from (defaults to now).
    :param log_offset: characters of the job log already written to the task log.
    :param stream_logs: write new job-log lines into the task log at every poll.
    :param stop_on_timeout: deprecated (triggers of earlier releases); use ``cleanup_policy``.
    :param stop_on_cancel: deprecated (triggers of earlier releases); use ``cleanup_policy``.
    :param retry_attempts: attempts per API call on transient failures.
    :param cleanup_policy: ``never``, ``on_exception`` or ``always``: whether the timeout and a user's kill
        of the deferred task stop the job (docs/launch.md, "Cleanup").
    :param owns_cluster: ``cluster`` is the task's own cluster (the one-task operator): a user's kill
        deletes it too, as ``cleanup_policy`` says.
    :param cluster_conn_id: the connection that cluster was created through (``None``: local).
    :param usage: the usage record's request (``UsageRequest.to_dict()``; ``None``: no record): a user's
        kill of the deferred task makes the record (``ended_by: killed``) and logs its line. With it, the
        job's process CPU is sampled while the trigger waits (:func:`~airflow_ray_provider.launch.usage.
        asampling`); the ledger rides in the event (``busy``) for ``execute_complete``'s record.
    """

    def __init__(
        self,
        *,
        submission_id: str,
        ray_conn_id: str | None = None,
        cluster: dict[str, Any] | None = None,
        poll_interval: float = 5.0,
        timeout: float | None = None,
        start_time: float | None = None,
        log_offset: int = 0,
        stream_logs: bool = True,
        stop_on_timeout: bool | None = None,
        stop_on_cancel: bool | None = None,
        retry_attempts: int = 5,
        cleanup_policy: str | None = None,
        owns_cluster: bool = False,
        cluster_conn_id: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.submission_id = submission_id
        self.ray_conn_id = ray_conn_id
        self.cluster = cluster
        self.poll_interval = float(poll_interval)
        self.timeout = float(timeout) if timeout is not None else None
        self.start_time = float(start_time) if start_time is not None else time.time()
        self.log_offset = int(log_offset)
        self.stream_logs = stream_logs
        legacy = legacy_cleanup(stop_on_timeout, stop_on_cancel)
        if cleanup_policy is not None:
            self.cleanup_policy = Cleanup.parse(cleanup_policy, field_name="cleanup_policy")
        else:
            self.cleanup_policy = legacy or Cleanup.ON_EXCEPTION
        self.retry_attempts = retry_attempts
        self.owns_cluster = owns_cluster
        self.cluster_conn_id = cluster_conn_id
        self.usage = usage
        #: The record a kill made (for tests and logs; not serialised).
        self.killed_record: dict[str, Any] | None = None
        #: The busy-CPU samples of this wait (``None`` without a usage record; not serialised).
        self.busy: BusyLedger | None = None

    @property
    def stop_on_cancel(self) -> bool:
        """Whether a user's kill of the deferred task stops the job."""
        return actions_for(self.cleanup_policy, Ending.USER_KILL).stop_job

    @property
    def stop_on_timeout(self) -> bool:
        """Whether the timeout stops the job."""
        return actions_for(self.cleanup_policy, Ending.TIMED_OUT).stop_job

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and every constructor argument (JSON-safe, no secrets)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "submission_id": self.submission_id,
                "ray_conn_id": self.ray_conn_id,
                "cluster": self.cluster,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "start_time": self.start_time,
                "log_offset": self.log_offset,
                "stream_logs": self.stream_logs,
                "stop_on_timeout": None,
                "stop_on_cancel": None,
                "retry_attempts": self.retry_attempts,
                "cleanup_policy": self.cleanup_policy.value,
                "owns_cluster": self.owns_cluster,
                "cluster_conn_id": self.cluster_conn_id,
                "usage": self.usage,
            },
        )

    @cached_property
    def hook(self) -> RayJobHook:
        """The hook (resolves its connection on first use, off the event loop)."""
        return RayJobHook(self.ray_conn_id, cluster=self.cluster, retry_attempts=self.retry_attempts)

    def wait_plan(self) -> WaitPlan:
        """The wait this trigger carries (every field came through its kwargs)."""
        return WaitPlan(
            start_time=self.start_time,
            timeout=self.timeout,
            log_offset=self.log_offset,
            stream_logs=self.stream_logs,
            cleanup=self.cleanup_policy,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait until the job is terminal, the timeout expires, or an error occurs; fire one event."""
        sid = self.submission_id
        try:
            async with await self._sampling():
                outcome = await await_job(
                    self.hook,
                    sid,
                    self.wait_plan(),
                    emit=lambda lines: emit_lines(self.log, lines),
                    poll_interval=self.poll_interval,
                )
            event = event_for(sid, outcome)
            if self.busy is not None and not isinstance(event, JobWaitFailed):
                event = dataclasses.replace(event, busy=self.busy.to_dict())
            yield TriggerEvent(event.to_payload())
        except Exception as exc:  # an event, never an exception: execute_complete explains it
            self.log.warning("Waiting for Ray job %s failed: %s", sid, exc)
            message = f"{type(exc).__name__}: {exc}"
            yield TriggerEvent(JobWaitFailed(sid, message, self.log_offset).to_payload())
        finally:
            await self.hook.aclose()

    async def _sampling(self) -> AbstractAsyncContextManager[Any]:
        """Sample the job's process CPU into :attr:`busy` while the block waits (with a usage record)."""
        if not self.usage:
            return nullcontext()
        from airflow_ray_provider.launch.usage import BusyLedger, asampling

        self.busy = BusyLedger(since=self.start_time)
        try:
            state = await asyncio.to_thread(self.hook.dashboard_state)
        except Exception as exc:  # the wait itself reports a cluster it cannot reach; busy says why
            self.busy.failed(f"no dashboard to sample: {exc}")
            return nullcontext()
        return asampling(state, self.busy)

    async def on_kill(self) -> None:
        """A user killed the deferred task (mark failed/success, clear): clean up as the policy says."""
        actions = actions_for(self.cleanup_policy, Ending.USER_KILL)
        try:
            if actions.stop_job:
                stopped = await self.hook.astop_job(self.submission_id)
                self.log.info(
                    "Stopped Ray job %s on task kill (was running: %s)", self.submission_id, stopped
                )
            await self._record_on_kill()  # while the cluster still exists
        finally:
            await self.hook.aclose()
            if actions.delete_cluster and self.owns_cluster and self.cluster is not None:
                await self._delete_cluster()

    async def _record_on_kill(self) -> None:
        """The usage record of what could be read now, its line into the log (no ``execute_complete``
        runs to publish it). Best effort: never raises."""
        if not self.usage:
            return
        from airflow_ray_provider.launch.usage import UsageRequest, collect_usage

        try:
            request = UsageRequest.from_dict(self.usage, ended_by="killed")
            state = await asyncio.to_thread(self.hook.dashboard_state)
            record = await asyncio.to_thread(collect_usage, state, request, busy=self.busy)
        except Exception as exc:
            self.log.warning("No usage record of Ray job %s on kill: %s", self.submission_id, exc)
            return
        self.log.info(
            "Usage of Ray job %s (task killed while deferred): %s", self.submission_id, record.line()
        )
        for name, why in sorted(record.not_available.items()):
            self.log.info("Usage record: %s not available: %s", name, why)
        self.killed_record = record.to_dict()

    async def _delete_cluster(self) -> None:
        from airflow_ray_provider.clusters import RayClusterHandle

        handle = RayClusterHandle.from_dict(self.cluster)
        deleted = await asyncio.to_thread(delete_cluster, handle, self.cluster_conn_id)
        self.log.info("Deleted the task's Ray cluster %s on kill (existed: %s)", handle.name, deleted)


def delete_cluster(handle: RayClusterHandle, conn_id: str | None, *, wait: bool = False) -> bool:
    """Delete a cluster through its backend (blocking; the trigger runs it in a thread)."""
    from airflow_ray_provider.hooks.cluster_backend import backend_for_handle

    backend = backend_for_handle(handle, conn_id=conn_id)
    try:
        return backend.delete(handle, wait=wait, timeout=60)
    finally:
        backend.close()

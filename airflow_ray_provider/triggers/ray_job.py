"""``RayJobTrigger``: wait for a Ray job in the triggerer, streaming its log, without importing ``ray``.

It serialises every argument and no secret: the token is resolved in the triggerer from the ``ray``
connection or the cluster handle. Every poll is non-blocking (aiohttp); any failure becomes an
``error`` event instead of an exception; ``job_timeout`` is measured from the serialised
``start_time``, so it survives deferrals and triggerer restarts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ray_provider.hooks.ray_job import RayJobHook, emit_lines
from airflow_ray_provider.jobs.log_stream import new_log_lines
from airflow_ray_provider.jobs.outcome import EVENT_DONE, EVENT_ERROR, EVENT_TIMEOUT, make_event


class RayJobTrigger(BaseTrigger):
    """Poll a Ray job until it finishes or times out, then fire one event.

    Event payload: ``{"status": "done"|"timeout"|"error", "submission_id": str, "job": JobState dict
    or None, "log_offset": int, "message": str}``.

    :param submission_id: the job to wait for.
    :param ray_conn_id: the ``ray`` connection (when no ``cluster`` is given).
    :param cluster: a cluster handle dict (takes precedence over ``ray_conn_id``).
    :param poll_interval: seconds between polls.
    :param timeout: seconds after ``start_time`` before giving up; ``None`` waits for ever.
    :param start_time: epoch seconds the timeout counts from (defaults to now).
    :param log_offset: characters of the job log already written to the task log.
    :param stream_logs: write new job-log lines into the task log at every poll.
    :param stop_on_timeout: stop the job when the timeout expires.
    :param stop_on_cancel: stop the job when a user kills the deferred task (``on_kill``).
    :param retry_attempts: attempts per API call on transient failures.
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
        stop_on_timeout: bool = True,
        stop_on_cancel: bool = True,
        retry_attempts: int = 5,
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
        self.stop_on_timeout = stop_on_timeout
        self.stop_on_cancel = stop_on_cancel
        self.retry_attempts = retry_attempts

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
                "stop_on_timeout": self.stop_on_timeout,
                "stop_on_cancel": self.stop_on_cancel,
                "retry_attempts": self.retry_attempts,
            },
        )

    @cached_property
    def hook(self) -> RayJobHook:
        """The hook (resolves its connection on first use, off the event loop)."""
        return RayJobHook(self.ray_conn_id, cluster=self.cluster, retry_attempts=self.retry_attempts)

    def _timed_out(self) -> bool:
        return self.timeout is not None and time.time() >= self.start_time + self.timeout

    async def _stream(self, offset: int, *, final: bool) -> int:
        text = await self.hook.aget_job_logs(self.submission_id)
        lines, offset = new_log_lines(text, offset, final=final)
        emit_lines(self.log, lines)
        return offset

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until the job is terminal, the timeout expires, or an error occurs."""
        sid, offset = self.submission_id, self.log_offset
        try:
            while True:
                state = await self.hook.aget_job(sid)
                if state is None:
                    yield TriggerEvent(
                        make_event(EVENT_ERROR, sid, log_offset=offset, message="job not found")
                    )
                    return
                if self.stream_logs:
                    offset = await self._stream(offset, final=state.is_terminal)
                if state.is_terminal:
                    yield TriggerEvent(make_event(EVENT_DONE, sid, state=state, log_offset=offset))
                    return
                if self._timed_out():
                    stopped = await self.hook.astop_job(sid) if self.stop_on_timeout else False
                    message = "stopped" if stopped else "left running"
                    yield TriggerEvent(
                        make_event(EVENT_TIMEOUT, sid, state=state, log_offset=offset, message=message)
                    )
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # an event, never an exception: execute_complete explains it
            self.log.warning("Waiting for Ray job %s failed: %s", sid, exc)
            message = f"{type(exc).__name__}: {exc}"
            yield TriggerEvent(make_event(EVENT_ERROR, sid, log_offset=offset, message=message))
        finally:
            await self.hook.aclose()

    async def on_kill(self) -> None:
        """A user killed the deferred task (mark failed/success, clear): stop the job if asked to."""
        if not self.stop_on_cancel:
            return
        try:
            stopped = await self.hook.astop_job(self.submission_id)
            self.log.info("Stopped Ray job %s on task kill (was running: %s)", self.submission_id, stopped)
        finally:
            await self.hook.aclose()

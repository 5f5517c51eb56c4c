"""``RayJobTrigger``: a run's wait in the triggerer, from its handed-over state (JSON, no secret), without
importing ``ray``; a user's clear keeps the job for the next try (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ray_provider.hooks.ray_job import emit_lines, target_from_ref
from airflow_ray_provider.launch import Ending, JobRun
from airflow_ray_provider.launch.usage import usage_line

#: Task instance states a user's mark leaves; any other state at ``on_kill`` means the task was cleared.
MARKED_STATES = frozenset({"failed", "success", "skipped", "upstream_failed", "removed"})
#: Seconds after the hand-over past which a trigger that starts is taken for one a triggerer restarted.
RESTART_AFTER_S = 60.0


class RayJobTrigger(BaseTrigger):
    """Drive a deferred run's wait to its end; fire one event ``{"run": <its state>, "error": <why the wait
    failed, or None>}``.

    :param run: the run's state (``JobRun.hand_over()``).
    """

    def __init__(self, *, run: dict[str, Any]) -> None:
        super().__init__()
        self.run_state = run
        #: The usage record a user's kill made here (no ``execute_complete`` runs to publish it).
        self.record: dict[str, Any] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and the run's state (JSON, no secret)."""
        return f"{type(self).__module__}.{type(self).__qualname__}", {"run": self.run_state}

    async def _job_run(self) -> JobRun:
        target = await asyncio.to_thread(target_from_ref, self.run_state["target"])
        lines = lambda batch: emit_lines(self.log, batch)  # noqa: E731
        return JobRun.from_state(self.run_state, target, on_lines=lines, say=self.log.info)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait for the job; one event."""
        job_run: JobRun | None = None
        try:
            job_run = await self._job_run()
            handed = float((self.run_state.get("times") or {}).get("handed_over") or time.time())
            offset = job_run.plan.log_offset if job_run.stream_logs else 0
            if offset and time.time() - handed > RESTART_AFTER_S:  # the log from the hand-over's offset
                self.log.info("Streaming the job log again from character %d: lines may repeat", offset)
            await job_run.await_end()
            yield TriggerEvent({"run": job_run.state(), "error": None})
        except Exception as exc:  # an event, never an exception: execute_complete explains it
            self.log.warning("Waiting for Ray job %s failed: %s", self.run_state.get("submission_id"), exc)
            state = job_run.state() if job_run is not None else self.run_state
            yield TriggerEvent({"run": state, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            if job_run is not None:
                await job_run.target.aclose()
                await asyncio.to_thread(job_run.target.close)

    async def _cleared(self) -> bool:
        """Whether the task instance was cleared (not marked finished): its next try owns the job."""
        ti = getattr(self, "task_instance", None)
        if ti is None:
            return False
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            map_index = -1 if ti.map_index is None else ti.map_index
            states = await asyncio.to_thread(
                RuntimeTaskInstance.get_task_states, dag_id=ti.dag_id, task_ids=[ti.task_id],
                run_ids=[ti.run_id], map_index=map_index,
            )  # fmt: skip
        except Exception as exc:  # no Task SDK channel here: the kill is taken as it comes
            self.log.warning("Could not read the task instance's state (%s): taking this as a kill", exc)
            return False
        key = ti.task_id if map_index < 0 else f"{ti.task_id}_{map_index}"
        state = (states.get(ti.run_id) or {}).get(key)
        return str(getattr(state, "value", state) or "") not in MARKED_STATES

    async def on_kill(self) -> None:
        """A user acted on the deferred task: a clear keeps the job for the next try; a mark ends the run as
        a user's kill (as ``cleanup`` says)."""
        if await self._cleared():
            self.log.info("The task was cleared: Ray job %s keeps running and its next try re-attaches to it",
                          self.run_state.get("submission_id"))  # fmt: skip
            return
        job_run = await self._job_run()
        await job_run.akill(Ending.USER_KILL)
        self.record = record = job_run.record
        if record:
            sid, line = record.get("submission_id"), usage_line(record)
            self.log.info("Usage of Ray job %s (task killed while deferred): %s", sid, line)

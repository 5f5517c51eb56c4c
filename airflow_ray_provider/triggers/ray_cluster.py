"""Deferrable wait until a Ray cluster's head is ready and its dashboard answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ray_provider.clusters import EVENT_ERROR, ClusterPlan, TokenRef, make_event
from airflow_ray_provider.hooks.kuberay import backend_for_connection
from airflow_ray_provider.launch import apoll, readiness_rule

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import ClusterBackend


@dataclass(eq=False, repr=False, kw_only=True)
class RayClusterReadyTrigger(BaseTrigger):
    """Look at a cluster from the triggerer through its backend, in a worker thread; one
    :class:`~airflow_ray_provider.clusters.ReadinessEvent` (never the token).

    :param plan: the cluster, as :meth:`for_plan` writes it.
    :param start_time: epoch seconds when waiting began (kept across triggerer restarts).
    """

    conn_id: str | None
    plan: dict[str, Any]
    timeout: float = 900.0
    poll_interval: float = 5.0
    start_time: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        super().__init__()

    @classmethod
    def for_plan(
        cls, conn_id: str | None, plan: ClusterPlan, *, timeout: float, poll_interval: float
    ) -> RayClusterReadyTrigger:
        """The trigger for ``plan``, holding what a readiness look needs as JSON: its token Secret by name,
        never the token."""
        ref = plan.token_ref
        named = {key: getattr(plan, key) for key in ("name", "namespace", "dashboard_url_template")}
        token_ref = [ref.secret_name, ref.key] if ref else None
        return cls(conn_id=conn_id, plan={**named, "token_ref": token_ref}, timeout=timeout,
                   poll_interval=poll_interval)  # fmt: skip

    def cluster_plan(self) -> ClusterPlan:
        """The plan a readiness look takes, rebuilt from :attr:`plan`."""
        ref = self.plan.get("token_ref")
        return ClusterPlan(**{**self.plan, "token_ref": TokenRef(*ref) if ref else None})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and every constructor argument."""
        return f"{type(self).__module__}.{type(self).__qualname__}", asdict(self)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Yield one event: ready, failed, timeout or error (the same rule as the blocking wait)."""
        backend: ClusterBackend | None = None
        plan = self.cluster_plan()
        decide = partial(readiness_rule, started=self.start_time, timeout=self.timeout, logger=self.log)
        try:
            backend = await asyncio.to_thread(backend_for_connection, self.conn_id, namespace=plan.namespace)
            look = partial(asyncio.to_thread, backend.check, plan)
            yield TriggerEvent(dict(await apoll(look, decide, interval=self.poll_interval)))
        except Exception as exc:  # turned into an event: the operator cleans up and fails with it
            self.log.exception("RayClusterReadyTrigger failed for %s/%s", plan.namespace, plan.name)
            yield TriggerEvent(dict(make_event(EVENT_ERROR, message=f"{type(exc).__name__}: {exc}")))
        finally:
            if backend is not None:
                await asyncio.to_thread(backend.close)

"""Deferrable wait until a RayCluster's head is ready and its dashboard answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class RayClusterReadyTrigger(BaseTrigger):
    """Poll a RayCluster from the triggerer; every Kubernetes and HTTP call runs in a worker thread.

    Events: ``{"status": "ready", "dashboard_url", "message"}``, or ``"timeout"`` / ``"failed"`` /
    ``"error"`` with ``message`` and ``conditions``. The token is read here and never put in an event.

    :param conn_id: the ``kuberay`` connection.
    :param name: the RayCluster's name.
    :param namespace: its namespace.
    :param dashboard_url_template: see :func:`airflow_ray_provider.kuberay.status.dashboard_url`.
    :param token_secret: the token Secret's name (``None``: no auth).
    :param token_key: the key inside it.
    :param timeout: seconds from ``start_time`` before giving up.
    :param poll_interval: seconds between looks.
    :param start_time: epoch seconds when waiting began (kept across triggerer restarts).
    """

    def __init__(
        self,
        *,
        conn_id: str,
        name: str,
        namespace: str,
        dashboard_url_template: str | None = None,
        token_secret: str | None = None,
        token_key: str = "auth_token",
        timeout: float = 900.0,
        poll_interval: float = 5.0,
        start_time: float | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.name = name
        self.namespace = namespace
        self.dashboard_url_template = dashboard_url_template
        self.token_secret = token_secret
        self.token_key = token_key
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.start_time = time.time() if start_time is None else start_time

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and every constructor argument."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "name": self.name,
                "namespace": self.namespace,
                "dashboard_url_template": self.dashboard_url_template,
                "token_secret": self.token_secret,
                "token_key": self.token_key,
                "timeout": self.timeout,
                "poll_interval": self.poll_interval,
                "start_time": self.start_time,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Yield one event: ready, failed, timeout or error."""
        from airflow_ray_provider.hooks.kuberay import KubeRayHook

        hook = None
        try:
            connection = await KubeRayHook.aget_connection(self.conn_id)
            hook = KubeRayHook(self.conn_id, namespace=self.namespace, connection=connection)
            while True:
                check = await asyncio.to_thread(self._check, hook)
                event = self._event_for(check)
                if event is not None:
                    yield TriggerEvent(event)
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # turned into an event: the operator cleans up and fails with it
            self.log.exception("RayClusterReadyTrigger failed for %s/%s", self.namespace, self.name)
            yield TriggerEvent(
                {"status": "error", "message": f"{type(exc).__name__}: {exc}", "conditions": []}
            )
        finally:
            if hook is not None and "api_client" in hook.__dict__:
                await asyncio.to_thread(hook.api_client.close)

    def _check(self, hook: Any) -> Any:
        from airflow_ray_provider.kuberay.builder import TokenRef
        from airflow_ray_provider.kuberay.readiness import check_ready

        token_ref = TokenRef(self.token_secret, self.token_key) if self.token_secret else None
        return check_ready(
            hook.client,
            self.name,
            namespace=self.namespace,
            dashboard_url_template=self.dashboard_url_template,
            token_ref=token_ref,
        )

    def _event_for(self, check: Any) -> dict[str, Any] | None:
        from airflow_ray_provider.kuberay.readiness import timeout_message

        if check.verdict == "ready":
            return {"status": "ready", "dashboard_url": check.dashboard_url, "message": check.message}
        if check.verdict == "failed":
            return {"status": "failed", "message": check.message, "conditions": check.conditions}
        if time.time() - self.start_time >= self.timeout:
            message = timeout_message(self.name, self.namespace, self.timeout, check)
            return {"status": "timeout", "message": message, "conditions": check.conditions}
        self.log.info("RayCluster %s/%s not ready yet: %s", self.namespace, self.name, check.message)
        return None

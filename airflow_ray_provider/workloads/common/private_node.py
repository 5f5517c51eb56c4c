"""A private local Ray without the head processes nobody reads: no dashboard, autoscaler or log monitor.

A standalone workload starts a Ray of its own (:mod:`~airflow_ray_provider.workloads.common.ray_session`,
rule 5) that no user watches and no job is submitted to. ``ray.init`` still starts, for every such
Ray, three Python processes that only matter on a shared cluster:

* the **dashboard** process: with ``include_dashboard=False`` it loads one module (usage stats, which a
  private Ray has off), yet ``ray.init`` waits until it has published its address before the raylet
  starts (~2 s of every start, measured here);
* the **autoscaler monitor**: a cluster nobody configured to scale runs Ray's read-only provider, which
  adds no node; it is also slow to stop (most of ``ray.shutdown``'s ~1 s);
* the **log monitor**: it forwards workers' output to the driver, which a private Ray turns off
  (``log_to_driver=False``); workers still write their log files.

:func:`lean_private_node` leaves them out, for the one ``ray.init`` that starts a private Ray: it
swaps Ray's head-node class (``ray._private.node.Node``, which ``ray.init`` looks up when it starts a
node) for a subclass for that call only. Ray exposes no switch for the dashboard in ``ray.init``; the
other two are ``ray start``'s ``--no-monitor`` and ``--include-log-monitor=false``, set here on the
same ``RayParams``. Measured with Ray 2.60 on a 2-core machine (2026-12-04, load 0.4-0.8, three runs
each, side by side): ``ray.init`` 4.9-5.4 s -> 3.2-3.3 s, ``ray.shutdown`` 1.2 s -> 0.2 s. A Ray whose
node class lacks what this relies on is started as Ray starts it (logged), never half-patched.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

#: The ``RayParams`` fields set on a private head (the ``ray start`` flags named in the docstring).
LEAN_PARAMS: dict[str, bool] = {"no_monitor": True, "include_log_monitor": False}
#: The class ``ray.init`` looks up in ``ray._private.node`` when it starts a node.
NODE_CLASS = "Node"
#: The head-node method that starts the dashboard process and waits for its address.
DASHBOARD_STARTER = "start_api_server"


def lean_node_class(base: type) -> type:
    """A subclass of Ray's node class ``base`` that starts no dashboard, autoscaler or log monitor."""

    class PrivateHeadNode(base):  # type: ignore[misc, valid-type]
        def __init__(self, ray_params: Any, *args: Any, **kwargs: Any) -> None:
            for name, value in LEAN_PARAMS.items():
                setattr(ray_params, name, value)
            super().__init__(ray_params, *args, **kwargs)

        def start_api_server(self, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
            # What Ray records when its api server runs without a dashboard: no URL.
            self._webui_url = ""

    PrivateHeadNode.__qualname__ = PrivateHeadNode.__name__
    return PrivateHeadNode


def supports_lean_node(node_class: type, params_class: type) -> bool:
    """Whether this Ray's node and params classes have what :func:`lean_node_class` relies on."""
    params = params_class()
    return callable(getattr(node_class, DASHBOARD_STARTER, None)) and all(
        hasattr(params, name) for name in LEAN_PARAMS
    )


@contextlib.contextmanager
def lean_private_node() -> Iterator[bool]:
    """Within the ``with``, a ``ray.init`` that starts a new local Ray starts a lean head (see the module
    docstring); yields whether it will (``False``: this Ray lacks what it relies on, started as usual)."""
    import ray._private.node as node_module
    import ray._private.parameter as parameter_module

    base: type = getattr(node_module, NODE_CLASS)
    if not supports_lean_node(base, parameter_module.RayParams):
        missing = f"{DASHBOARD_STARTER} or {'/'.join(LEAN_PARAMS)}"
        log.info("this Ray's head node has no %s: its private Ray starts every process", missing)
        yield False
        return
    setattr(node_module, NODE_CLASS, lean_node_class(base))
    try:
        yield True
    finally:
        setattr(node_module, NODE_CLASS, base)

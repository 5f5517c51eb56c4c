"""Whether a node can ever hold one zone's ``num_cpus``, checked before any zone is trained.

Ray queues a task no node can hold without an error ("0/204 done, 1 in flight" for ever), so the
request is compared with the nodes first:

* a **private local Ray** (standalone) gets this machine's CPUs: checked before Ray even starts;
* a **cluster without an autoscaler**: its largest alive node decides, at once;
* a cluster **with an autoscaler** (KubeRay's, Ray's own) may still add a bigger node: the job says
  what it waits for and gives up after ``capacity_wait_s``.

Whether the cluster can grow is :func:`~airflow_ray_provider.workloads.common.autoscaler.autoscaling`
(shared with the evaluation's packing check).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from airflow_ray_provider.workloads.common import autoscaling, scales_from_status
from airflow_ray_provider.workloads.common.errors import ConfigError

__all__ = ["autoscaling", "check_local", "local_cpus", "scales_from_status", "shortfall", "wait_for_capacity"]
log = logging.getLogger(__name__)

POLL_S = 2.0


def shortfall(num_cpus: float, largest: float, *, where: str) -> str | None:
    """The error when no node of ``largest`` CPUs holds ``num_cpus`` (``None`` when one does; pure)."""
    if num_cpus <= largest:
        return None
    return (
        f"num_cpus: each zone asks for {num_cpus:g} CPUs, but {where} has at most {largest:g} CPUs on one "
        f"node, so no zone could ever start: lower num_cpus to {largest:g} or less, or run on a cluster "
        "with a node that large"
    )


def local_cpus() -> float:
    """CPUs a private local Ray started by this process gets (its affinity mask, as Ray counts them)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return float(len(affinity(0)) if affinity else os.cpu_count() or 1)


def check_local(num_cpus: float) -> None:
    """Before a private local Ray starts: this machine's CPUs must hold one zone.

    :raises ConfigError: naming ``num_cpus``.
    """
    error = shortfall(num_cpus, local_cpus(), where="this machine (a private local Ray)")
    if error:
        raise ConfigError(error)


def largest_node_cpus() -> float:
    """CPUs of the connected cluster's largest alive node."""
    import ray

    return max(
        (float(n.get("Resources", {}).get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")), default=0.0
    )


def wait_for_capacity(
    num_cpus: float,
    wait_s: float,
    *,
    largest: Callable[[], float] = largest_node_cpus,
    scales: Callable[[], bool] = autoscaling,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """On a connected cluster: return once a node can hold ``num_cpus``; refuse or give up otherwise.

    :param wait_s: how long an autoscaling cluster is given to add such a node.
    :raises ConfigError: naming ``num_cpus`` (and ``capacity_wait_s`` when it waited).
    """
    error = shortfall(num_cpus, largest(), where="this Ray cluster")
    if error is None:
        return
    if not scales():
        raise ConfigError(error)
    log.warning(
        "waiting up to %gs (capacity_wait_s) for the autoscaler to add a node with %g CPUs "
        "(num_cpus per zone; the largest node now has %g)",
        wait_s,
        num_cpus,
        largest(),
    )
    deadline = clock() + wait_s
    while clock() < deadline:
        sleep(min(POLL_S, max(deadline - clock(), 0.0)))
        if shortfall(num_cpus, largest(), where="") is None:
            log.info("a node with %g CPUs joined; training starts", num_cpus)
            return
    raise ConfigError(f"{error} (the autoscaler added no such node within capacity_wait_s={wait_s:g}s)")

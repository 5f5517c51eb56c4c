"""Which engine trains the zones: Ray tasks, or worker processes on this machine (no Ray).

``engine: auto`` (the default) picks, and logs why (the choice is also in ``summary.json``,
``run.engine``):

* **ray** inside a Ray job, with ``ray_address``, ``RAY_ADDRESS`` or a Ray already initialised in the
  process: the cluster is there (maybe many nodes), its start is paid;
* **local** for a standalone run (the command on a laptop or a single machine): Ray would first have
  to start a private one-node cluster (seconds, and its worker processes compete with the training on
  the same cores) only to do what a pool of worker processes does (:mod:`.local_engine`): the same
  batches, trainer code, model files and manifest, every core of this machine;
* **ray** for a standalone input too big to stage locally: more rows than ``local_max_rows``
  (default: what a quarter of this machine's memory holds; Ray's object store can spill to disk).

``engine: ray`` and ``engine: local`` force an engine (``local`` inside a Ray job is allowed and
logged as a warning: it uses only the driver's machine).
"""

from __future__ import annotations

import logging
import os

from airflow_ray_provider.workloads.common.engine_choice import EngineChoice

log = logging.getLogger(__name__)

#: Share of this machine's memory a standalone ``auto`` run may fill with staged rows.
LOCAL_MEMORY_SHARE = 0.25


def staged_bytes(rows: int, columns: int) -> int:
    """Bytes of ``rows`` staged rows of ``columns`` numeric columns (float64, the common case)."""
    return rows * columns * 8


def default_local_max_rows(columns: int, memory_bytes: int) -> int:
    """Rows whose staged copy fills :data:`LOCAL_MEMORY_SHARE` of ``memory_bytes``."""
    return int(memory_bytes * LOCAL_MEMORY_SHARE) // max(staged_bytes(1, columns), 1)


def choose_engine(
    requested: str, *, standalone: bool, rows: int, staged: bool, local_max_rows: int
) -> EngineChoice:
    """Decide the engine (pure).

    :param requested: ``auto``, ``ray`` or ``local`` (the config's ``engine``).
    :param standalone: no Ray is running for this run (choosing Ray means starting a private one).
    :param rows: rows to train; :param staged: whether they must be staged in memory (a dataset
        partitioned by zone is read by each task from its files instead).
    :param local_max_rows: the largest staged input ``auto`` trains locally.
    """
    where = (
        f"{rows:,} rows, {'standalone' if standalone else 'Ray cluster available'}, "
        f"local limit {local_max_rows:,} rows{'' if staged else ' (partitioned by zone: not staged)'}"
    )
    if requested == "ray":
        return EngineChoice("ray", f"engine: ray in the config ({where})")
    if requested == "local":
        if not standalone:
            log.warning("engine: local with a Ray cluster available: only this machine trains (%s)", where)
        return EngineChoice("local", f"engine: local in the config ({where})")
    if not standalone:
        return EngineChoice("ray", f"auto: inside a Ray job or connected to a cluster, Ray trains ({where})")
    if staged and rows > local_max_rows:
        return EngineChoice("ray", f"auto: too many rows to stage on this machine ({where})")
    return EngineChoice(
        "local", f"auto: standalone, worker processes on this machine skip starting a private Ray ({where})"
    )


def memory_bytes() -> int:
    """Physical memory of this machine (Linux, macOS); 8 GiB when unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30

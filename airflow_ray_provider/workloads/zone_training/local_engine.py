"""The local engine: the zones trained by worker processes on this machine, no Ray (see :mod:`.engine`).

Same steps as on Ray, same code for each: the chunks are staged with :func:`.staging.stage_chunk`
(in driver threads: Arrow reads and takes release the GIL) into Arrow IPC files in a private folder (in
``/dev/shm`` where there is one), the adaptive batcher and scheduler hand batches to a
:class:`~.process_pool.ProcessPool`, whose workers run :func:`.worker.run_batch`. The workers start
while the data is staged. The folder is removed afterwards, also on failure.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.zone_training.batching import AdaptiveBatcher, ZoneItem
from airflow_ray_provider.workloads.zone_training.capacity import local_cpus
from airflow_ray_provider.workloads.zone_training.process_pool import ProcessPool
from airflow_ray_provider.workloads.zone_training.scheduler import ZoneScheduler, ZoneSources
from airflow_ray_provider.workloads.zone_training.staging import StagedData, stage_chunk, zone_pieces

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.zone_training.config import ZoneTrainingConfig
    from airflow_ray_provider.workloads.zone_training.dataset import ChunkSpec, DatasetPlan
    from airflow_ray_provider.workloads.zone_training.worker import WorkerContext

#: Where the staged chunks go when the machine has a RAM-backed folder (else the temp dir).
SHM_DIR = "/dev/shm"


def train_locally(
    cfg: ZoneTrainingConfig,
    plan: DatasetPlan,
    ctx: WorkerContext,
    todo: list[str],
    attempts: dict[str, int],
    *,
    grace_s: float,
) -> tuple[list[dict[str, Any]], dict[str, float], dict[str, Any]]:
    """Stage (unless partitioned by zone) and train ``todo`` on this machine's cores.

    :returns: the result rows, the phases' seconds (``stage``, ``fan_out``) and the task figures.
    """
    slots = max(1, int(local_cpus() // cfg.num_cpus))
    folder = tempfile.mkdtemp(prefix="zonel", dir=SHM_DIR if os.access(SHM_DIR, os.W_OK) else None)
    try:
        paths = [os.path.join(folder, f"chunk-{n:05d}.arrow") for n in range(len(plan.chunks))]
        pool = ProcessPool(ctx, slots, paths, zone_timeout_s=cfg.zone_timeout_s, grace_s=grace_s)
        started = time.monotonic()
        pool.start()  # the workers start while the chunks are staged
        try:
            staged = None if plan.partitioned_by_zone else stage_to_files(plan, paths, slots)
            staged_at = time.monotonic()
            batcher = AdaptiveBatcher([ZoneItem(z, plan.zone_rows[z]) for z in todo], slots, cfg.batching)
            sources = ZoneSources(plan, staged, attempts)
            scheduler = ZoneScheduler(cfg=cfg, runner=pool, sources=sources, batcher=batcher, slots=slots)
            rows = scheduler.run()  # closes the pool
        finally:
            pool.close()
        timings = {"stage": staged_at - started, "fan_out": time.monotonic() - staged_at}
        return rows, timings, scheduler.task_figures()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def stage_to_files(plan: DatasetPlan, paths: list[str], threads: int) -> StagedData:
    """Stage every chunk into its IPC file (``paths[n]`` for chunk ``n``); chunk numbers stand for refs."""

    def stage(spec: ChunkSpec, path: str) -> dict[str, tuple[int, int]]:
        import pyarrow as pa

        table, index = stage_chunk(plan.fs, spec, plan.file_columns, plan.columns, plan.zone_column)
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return index

    with concurrent.futures.ThreadPoolExecutor(max(1, threads), "zone-stage") as pool:
        indexes = list(pool.map(stage, plan.chunks, paths))
    return StagedData(chunk_refs=list(range(len(paths))), pieces=zone_pieces(indexes))

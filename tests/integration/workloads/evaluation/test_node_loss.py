"""A worker node (a spot instance) disappears mid-evaluation: the metrics come out identical.

A real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): the head takes no work,
two worker nodes do it; mid-run the worker hosting a scoring actor is removed (its raylet and workers
are killed), like a reclaimed spot node. Reads are retried, actors restarted, lost blocks recomputed,
and the exact merge makes the result identical to the same evaluation computed without Ray at all.

The cluster and the run live in a fresh interpreter (``spawn``), as a Ray job's driver does: a pytest
worker that ran other Ray sessions before this one is no place for it (in full suites the scoring actors of
such a worker died before their first task with "all references to the actor were removed").
"""

from __future__ import annotations

import contextlib
import glob
import json
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from airflow_ray_provider.workloads.common.ray_session import quiet_private_ray
from airflow_ray_provider.workloads.evaluation.run import run_evaluation
from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset

pytestmark = pytest.mark.integration

#: A removed node is found dead in about 5 s (Ray's default: 30 s), and a live node on a loaded machine
#: is not (with 3 misses of 0.5 s each, full suites saw an actor die before any node was removed).
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 5,
}


def _config(
    eval_config: Callable[..., dict[str, Any]], data: str, model_uri: str, out: str, delay: float
) -> dict[str, Any]:
    slow = {
        "factory": "tests.fixtures.evaluation:make_slow_model",
        "kwargs": {"path": model_uri, "delay": delay},
    }
    return eval_config(
        data_uri=data,
        output_uri=out,
        models={"champion": slow, "challenger": {"uri": model_uri}},
        engine="ray",
        scoring={
            "concurrency": 2,
            "num_cpus": 0.5,
            "read_num_cpus": 0.5,
            "block_rows": 1000,
            "batch_size": 100_000,
        },
    )


def _scored_blocks(out: Any) -> int:
    """Prediction files written so far (one per scored block) in the run's staging folder."""
    return len(glob.glob(os.path.join(str(out), "_staging-*", "predictions", "part-*.parquet")))


def _without_ray(raw: dict[str, Any]) -> dict[str, Any]:
    """The same evaluation computed in this process, block by block, with no Ray and no node loss."""
    from airflow_ray_provider.workloads.evaluation import bootstrap
    from airflow_ray_provider.workloads.evaluation.aggregate import Accumulator
    from airflow_ray_provider.workloads.evaluation.artifact import clean_floats
    from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.names import metric_directions
    from airflow_ray_provider.workloads.evaluation.preflight import run_preflight
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    cfg = EvalConfig.from_dict(raw)
    pre = run_preflight(cfg)
    evaluator = BlockEvaluator(cfg, pre.features, pre.has_proba, None)
    acc = Accumulator(cfg, pre.has_proba)
    for unit in pre.units:
        acc.add(evaluator.evaluate(read_unit(unit, cfg.data_uri, pre.read_columns)))
    result = acc.finalize()
    directions = metric_directions(cfg.metrics, cfg.ndcg_k)  # as the run does: deltas with se and p
    deltas = bootstrap.paired_deltas(
        cfg, acc.buckets, acc.hist, result.overall, list(directions), directions=directions
    )
    return clean_floats({"metrics": result.overall, "slice_rows": result.slice_rows, "deltas": deltas})


def _nodes_with_scoring_actors() -> set[str]:
    """Node ids hosting a live scoring actor (GCS actor table; the dashboard is off here)."""
    from ray._private import state

    return {
        info["Address"]["NodeID"]
        for info in state.actors().values()
        if "BlockEvaluator" in info.get("ActorClassName", "") and info.get("State") == "ALIVE"
    }


def _print_ray_errors(temp: str) -> None:
    """The error lines of the cluster's Ray logs, shown with a failure (the temp dir goes right after)."""
    for path in sorted(glob.glob(os.path.join(temp, "session_*", "logs", "*"))):
        with contextlib.suppress(OSError), open(path, errors="replace") as lines:
            errors = [line for line in lines if " E " in line[:40] or "Error" in line or "died" in line]
        if errors:
            print(f"--- {os.path.basename(path)}", *errors[-20:], sep="\n")


def _remove_a_node_mid_run(cfg: dict[str, Any], staging: str, report: str) -> None:
    """In a fresh interpreter: a 3-node cluster, the run in a thread, the busy worker node removed mid-run.

    Writes ``report`` (JSON): ``doc`` (the run's artifact) or ``error`` (its traceback), and what was seen
    when the node went (``alive``, ``scored``).
    """
    import ray
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="arpnl", dir="/tmp")
    # Cluster() records its head in Ray's default temp dir ($RAY_TMPDIR/ray/ray_current_cluster), where
    # a bare ray.init() on this machine would find it: keep that file in this run's own folder.
    os.environ["RAY_TMPDIR"] = temp
    os.makedirs(os.path.join(temp, "ray"))
    out: dict[str, Any] = {}
    cluster = None
    thread: threading.Thread | None = None
    with quiet_private_ray():  # the workloads' environment for a local Ray: its own token, nothing in ~/.ray
        try:
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 0,
                    "_system_config": FAST_HEALTH_CHECKS,
                    "temp_dir": temp,
                    "include_dashboard": False,
                },
            )
            cluster.add_node(num_cpus=2)
            cluster.add_node(num_cpus=2)
            ray.init(address=cluster.address, log_to_driver=False)

            def run() -> None:
                try:
                    out["doc"] = run_evaluation(cfg)
                except BaseException as exc:  # reported below, with its cause
                    out["error"] = "".join(traceback.format_exception(exc))

            thread = threading.Thread(target=run)
            thread.start()
            # Worker start-up decides when the first block is scored: about 5 s on a quiet machine, over
            # 90 s at load 20. The wait costs nothing once it is over; the test's assertions are what count.
            deadline = time.monotonic() + 240
            # (The driver scores blocks itself until an actor is ready: wait for the actors' blocks.)
            busy: set[str] = set()
            while time.monotonic() < deadline and thread.is_alive():
                busy = _nodes_with_scoring_actors() if _scored_blocks(staging) else set()
                if busy:
                    break
                time.sleep(0.1)
            # Blocks are being scored on the worker: now the "spot node" goes away.
            out["alive"], out["scored"] = thread.is_alive(), _scored_blocks(staging)
            spot = next((node for node in cluster.worker_nodes if node.node_id in busy), None)
            if out["alive"] and spot is not None:
                cluster.remove_node(spot)
                thread.join(timeout=150)
                out["recovered"] = not thread.is_alive()
            if "error" in out or not out.get("recovered"):
                _print_ray_errors(temp)
        finally:
            if thread is not None and thread.is_alive():
                thread.join(timeout=150)  # a run still going would start Ray again under the shutdown
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            shutil.rmtree(temp, ignore_errors=True)
            with open(report, "w") as file:
                json.dump(out, file)


def test_removing_a_worker_node_mid_run_gives_identical_metrics(
    eval_config: Callable[..., dict[str, Any]],
    eval_sample: dict[str, str],
    tmp_path: Any,
) -> None:
    data = make_eval_dataset(
        str(tmp_path / "data"),
        24_000,
        zones=4,
        features=6,
        group_size=10,
        seed=5,
        rows_per_file=6000,
        row_group_size=1000,
    )
    cfg = _config(eval_config, data, eval_sample["challenger_uri"], str(tmp_path / "b"), 0.4)
    report = tmp_path / "report.json"
    process = multiprocessing.get_context("spawn").Process(
        target=_remove_a_node_mid_run,
        args=({**cfg, "write_predictions": True}, str(tmp_path / "b"), str(report)),
    )
    process.start()
    process.join(timeout=600)
    if process.is_alive():
        process.kill()
        process.join()
    assert process.exitcode == 0 and report.exists(), f"the run's process ended with {process.exitcode}"
    out = json.loads(report.read_text())
    assert out["alive"], out.get("error") or "the run finished before the node was removed"
    assert 0 < out["scored"] < 24
    assert out.get("recovered"), "the evaluation did not recover from the node loss"
    assert "error" not in out, out["error"]
    doc = out["doc"]
    expected = _without_ray(_config(eval_config, data, eval_sample["challenger_uri"], "unused", 0.0))
    assert doc["data"]["rows"] == 24_000
    assert doc["metrics"] == expected["metrics"]
    assert doc["slices"]["rows"] == expected["slice_rows"]
    assert doc["deltas"] == expected["deltas"]

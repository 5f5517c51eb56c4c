"""Kubernetes API calls per job: a RayCluster per run against a pool, on the KubeRay emulator.

Run: ``python -m benchmarks.bench_pool_api [--jobs 5]``. Figures go to stdout and
``benchmarks/out/pool_api.json``; see ``benchmarks/cluster.md``.

The tests' Kubernetes emulator (real HTTP, the official ``kubernetes`` client) and test KubeRay controller,
every RayCluster answered by one real local Ray head (``test.kuberay/head: shared``), so only the API
traffic differs. ``--jobs`` runs of a one-line job through ``launch.run`` one after the other, first each
on a RayCluster of its own (created, waited for, deleted: ``cleanup="always"``), then all on one pool
(``idle_ttl`` 600 s; the pool is deleted afterwards, not counted). Counted: the provider's requests
(the controller's own are left out), by verb, per job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).parent / "out"
TEMPLATE = "http://{service_ip}:{dashboard_port}"


def _count(kube: Any, since: int, agent: str) -> Counter[str]:
    return Counter(method for who, method, _ in kube.calls[since:] if who != agent)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bpapi", dir="/tmp") as folder:
        from airflow_ray_provider.local import LocalHeadConfig, read_token, start_head, stop_head
        from tests.fixtures.kuberay_emulator import (
            CONTROLLER_AGENT,
            HEAD_MODE,
            TEST_NAMESPACE,
            EmulatedKubernetes,
            TestKubeRayController,
        )

        os.environ["AIRFLOW_RAY_LOCAL_REGISTRY"] = str(Path(folder) / "registry")
        head = start_head(LocalHeadConfig(num_cpus=4, auth=True, ready_timeout=120), name="bench-pool-api")
        kube = EmulatedKubernetes().start()
        controller = TestKubeRayController(kube, head, read_token(head.token_file)).start()
        try:
            config = Path(folder) / "kubeconfig"
            config.write_text(json.dumps(kube.kubeconfig()))
            from kubernetes.config import kube_config

            kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(config)  # as $KUBECONFIG would on a laptop
            from airflow_ray_provider.launch import KubeRayCluster, kuberay_backend, run
            from airflow_ray_provider.launch.pool import delete_pool

            target = KubeRayCluster(
                "emulator", TEST_NAMESPACE, {"annotations": {HEAD_MODE: "shared"}}, TEMPLATE
            )
            pool = f"bench-{uuid.uuid4().hex[:6]}"
            figures: dict[str, Any] = {}
            for side in ("ephemeral", "pool"):
                since, started = len(kube.calls), time.perf_counter()
                for index in range(args.jobs):
                    run(
                        [sys.executable, "-c", "print('job')"], target=target, name=f"{side}-{index}-{pool}",
                        cleanup="always", poll_interval=0.5, emit=lambda lines: None, say=lambda line: None,
                        pool={"name": pool, "idle_ttl": 600} if side == "pool" else None,
                    )  # fmt: skip
                verbs = _count(kube, since, CONTROLLER_AGENT)
                figures[side] = {
                    "calls": sum(verbs.values()),
                    "per_job": round(sum(verbs.values()) / args.jobs, 1),
                    "by_verb": dict(verbs),
                    "wall_s": round(time.perf_counter() - started, 2),
                }
                print(side, json.dumps(figures[side]))
            backend = kuberay_backend("emulator", TEST_NAMESPACE)
            try:
                delete_pool(backend, backend.lease_store(), pool, lambda message: None)
            finally:
                backend.close()
        finally:
            controller.stop()
            kube.stop()
            stop_head(head)
    summary = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_1m": os.getloadavg()[0],
               "jobs": args.jobs, **figures}  # fmt: skip
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "pool_api.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

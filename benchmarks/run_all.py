"""Run every benchmark in turn (``make bench``). Each writes its own figures; see benchmarks/README.md."""

from __future__ import annotations

import importlib
import sys
import time

BENCHMARKS = [
    "benchmarks.bench_ray_job",
    "benchmarks.bench_cluster",
    "benchmarks.bench_evaluate",
    "benchmarks.bench_zone_training",
    "benchmarks.bench_dag_zones",
    "benchmarks.bench_usage",
    "benchmarks.bench_challengers",
    "benchmarks.bench_usage_zones",
    "benchmarks.bench_object_store",
    "benchmarks.bench_wheel",
]


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmarks (default: all) and report which failed."""
    names = argv if argv else BENCHMARKS
    failed = []
    for name in names:
        started = time.monotonic()
        print(f"=== {name}", flush=True)
        try:
            rc = importlib.import_module(name).main([])
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            print(f"{name} raised {exc!r}", flush=True)
            rc = 1
        print(f"=== {name}: rc={rc} in {time.monotonic() - started:.0f}s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

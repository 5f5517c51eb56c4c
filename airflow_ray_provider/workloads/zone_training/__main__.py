"""``python -m airflow_ray_provider.workloads.zone_training``: the workload's command."""

from __future__ import annotations

import sys

from airflow_ray_provider.workloads.common.cli import run_main
from airflow_ray_provider.workloads.zone_training.run import main

if __name__ == "__main__":
    sys.exit(run_main(main))

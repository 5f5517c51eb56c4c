"""Per-zone model training for several model applications, one Ray job per application.

Each application (here: delivery-time ``eta`` and ``demand`` forecasting) is one mapped task group:
its own ephemeral Ray cluster (own image, Python dependencies and sizing), one Ray job that trains a
model per zone, a manifest check, and one retry of only the zones that failed. The cluster is torn down
whatever happens. Runs as is with generated sample data; see :mod:`airflow_ray_provider.templates.defaults`
for the environment overrides. Models go to a folder per run day (``RUN_DATE``: the logical date's, or
the trigger day of a run without one).
"""

from __future__ import annotations

from pathlib import Path

from airflow_ray_provider.templates import RUN_DATE, defaults
from airflow_ray_provider.templates.zone_training import ZoneApplication, build_zone_training_dag

ROOT = defaults.data_root(Path(__file__).parent)
CLUSTER = defaults.cluster_settings()


def _sample(name: str, seed: int) -> list[str] | None:
    """The job that writes this application's sample data (when sample data is on)."""
    if not defaults.sample_data_enabled():
        return None
    return [
        CLUSTER.interpreter, "-m", "airflow_ray_provider.workloads.samples.prepare", "zones",
        "--out", f"{ROOT}/zones/{name}.parquet",
        "--zones", "40", "--rows-per-zone", "400", "--seed", str(seed),
    ]  # fmt: skip


# [START zone_training]
APPLICATIONS = [
    ZoneApplication(
        name="eta",
        data_uri=f"{ROOT}/zones/eta.parquet",
        zone_column="zone",
        label_column="y",
        trainer="ridge",
        trainer_kwargs={"alpha": 1.0},
        max_failed_fraction=0.2,
        # On KubeRay, give each application its own image and sizing, e.g. cluster_spec=
        # {"image": "registry/eta-trainer:1.4", "worker_groups": [{"name": "cpu", "replicas": 4}]},
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        prepare_entrypoint=_sample("eta", 1),
    ),
    ZoneApplication(
        name="demand",
        data_uri=f"{ROOT}/zones/demand.parquet",
        zone_column="zone",
        label_column="y",
        trainer="ridge",
        trainer_kwargs={"alpha": 3.0},
        max_failed_fraction=0.2,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        prepare_entrypoint=_sample("demand", 2),
    ),
]

dag = build_zone_training_dag(
    dag_id="zone_training",
    applications=APPLICATIONS,
    output_uri=ROOT + "/zone_models/" + RUN_DATE,
    cluster=CLUSTER,
    shared_cluster=False,  # one ephemeral cluster per application
    retry_failed_zones=True,
    max_failed_fraction_after_retry=0.0,
    schedule="@weekly",
    job_timeout=3600,
    poll_interval=defaults.poll_interval(),
    dag_kwargs={"tags": ["ray", "zone-training", "example"], "max_active_runs": 1},
)
# [END zone_training]

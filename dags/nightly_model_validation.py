"""Nightly champion-vs-challenger validation of a click-through-rate model.

Every day, on an ephemeral Ray cluster: evaluate the production model (champion) and a candidate
(challenger) on that day's click-log partition, decide with the policy below, write an HTML report
beside the metrics, and promote the challenger (an Asset event naming it) or keep the champion.

Runs as is with generated sample data (``make demo``). For your own models, replace the URIs, the
column map and the policy; set ``cluster_conn_id`` to a ``kuberay`` connection to run on Kubernetes.
Environment overrides: see :mod:`airflow_ray_provider.templates.defaults`. Paths use ``RUN_DATE`` (the
logical date's day, else the day the run was triggered), so a run triggered without a logical date
(``airflow dags trigger``, the REST API's default) reads that day's partition.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from airflow_ray_provider.templates import RUN_DATE, defaults
from airflow_ray_provider.templates.champion_challenger import (
    DecisionPolicy,
    Guardrail,
    PrimaryMetric,
    SliceRule,
    build_champion_challenger_dag,
)

ROOT = defaults.data_root(Path(__file__).parent)
CLUSTER = defaults.cluster_settings()

# [START decision_policy]
POLICY = DecisionPolicy(
    primary=PrimaryMetric("roc_auc", min_lift=0.002, require_ci_above_zero=True),
    guardrails=(
        Guardrail("log_loss", max_regression=0.01),
        Guardrail("calibration_error", max_regression=0.02),
    ),
    slice_rule=SliceRule(metric="roc_auc", max_regression=0.02, max_regressed_slices=2, min_rows=500),
)
# [END decision_policy]


def record_promotion(decision: dict, context: dict) -> str:
    """Stand-in for a model-registry call: record the new champion beside the data."""
    registry = os.path.join(ROOT, "registry")
    os.makedirs(registry, exist_ok=True)
    entry = {
        "model_uri": decision["challenger_uri"],
        "run_id": context["run_id"],
        "report": decision["report"],
    }
    path = os.path.join(registry, "champion.json")
    with open(path, "w") as handle:
        json.dump(entry, handle, indent=2)
    logging.getLogger(__name__).info("Registered %s as champion in %s", entry["model_uri"], path)
    return path


PREPARE = None
if defaults.sample_data_enabled():
    PREPARE = [
        CLUSTER.interpreter, "-m", "airflow_ray_provider.workloads.samples.prepare", "eval",
        "--root", ROOT, "--ds", RUN_DATE, "--rows", str(defaults.eval_rows()),
    ]  # fmt: skip

# [START nightly_model_validation]
dag = build_champion_challenger_dag(
    dag_id="nightly_model_validation",
    champion_uri=f"{ROOT}/models/champion.joblib",
    challenger_uri=f"{ROOT}/models/challenger.joblib",
    data_uri=ROOT + "/logs/dt=" + RUN_DATE,
    columns={"label": "clicked", "group": "request_id", "slices": ["zone"]},
    metrics=["accuracy", "roc_auc", "log_loss", "calibration", "ndcg"],
    ndcg_k=[5, 10],
    policy=POLICY,
    cluster=CLUSTER,
    artifact_uri=ROOT + "/validation/" + RUN_DATE,
    schedule="@daily",
    on_promote=record_promotion,
    evaluation_options={
        "bootstrap": {"samples": 200, "seed": 7},
        "scoring": {"concurrency": 2, "num_cpus": 0.5},
    },
    prepare_entrypoint=PREPARE,
    job_timeout=1800,
    poll_interval=defaults.poll_interval(),
    dag_kwargs={"tags": ["ray", "model-validation", "example"], "max_active_runs": 1},
)
# [END nightly_model_validation]

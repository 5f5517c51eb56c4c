"""Full runs of the templates through ``dag.test()``: real Airflow (SQLite), real ephemeral local Ray heads.

Every run starts its own heads through the create-cluster setup task; each test checks afterwards that
the teardown stopped them (process group gone, temp dir removed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.dag_runs import load_dag, run_dag, task_states, write_dag, xcom_value
from tests.fixtures.openlineage import complete_event, openlineage_events_fixture  # noqa: F401 (a fixture)
from tests.fixtures.templates import REPO_ROOT, assert_heads_stopped

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

DS = "2026-11-28"


@pytest.fixture
def shipped_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Environment of the shipped DAGs: embedded defaults, data under a temp folder, a small partition."""
    root = tmp_path / "data"
    for name in ("AIRFLOW_RAY_CONN_ID", "AIRFLOW_RAY_CLUSTER_CONN_ID", "AIRFLOW_RAY_SAMPLE_DATA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_RAY_DATA_ROOT", str(root))
    monkeypatch.setenv("AIRFLOW_RAY_EVAL_ROWS", "12000")  # 20 zones x ~600 rows: above the slice min_rows
    monkeypatch.setenv("AIRFLOW_RAY_LOCAL_CPUS", "2")
    monkeypatch.setenv("AIRFLOW_RAY_POLL_INTERVAL", "0.3")  # the job-status polls: not waited out
    return root


def test_nightly_dag_runs_end_to_end_and_promotes(
    dags_folder: Path, shipped_env: Path, openlineage_events: Any
) -> None:
    path = Path(shutil.copy(REPO_ROOT / "dags" / "nightly_model_validation.py", dags_folder))
    dag_run = run_dag(load_dag(path), DS)
    states = task_states(dag_run)
    handle = xcom_value(dag_run, "create_cluster")
    assert_heads_stopped([handle])
    assert dag_run.state == "success", states
    decision = xcom_value(dag_run, "decide")
    # The sample challenger is trained on 40x more data: it wins on AUC with a CI clear of zero.
    assert decision["outcome"] == "promote", decision["reasons"]
    assert states["promote"] == "success" and states["keep_champion"] == "skipped"
    assert states["prepare"] == states["evaluate"] == states["delete_cluster"] == "success"
    artifact = shipped_env / "validation" / DS
    assert (artifact / "_SUCCESS").exists() and (artifact / "slices.parquet").exists()
    html = (artifact / "report.html").read_text()
    assert html.count('<rect class="bar"') > 20 and "PROMOTE" in html
    assert (
        "<h2>Run usage</h2>" in html
        and "Run usage (evaluation job): reserved" in (artifact / "report.md").read_text()
    )  # the evaluate job's usage.json, beside the metrics
    registry = json.loads((shipped_env / "registry" / "champion.json").read_text())
    assert (
        registry["model_uri"]
        == decision["challenger_uri"]
        == str(shipped_env / "models" / "challenger.joblib")
    )
    assert (
        _asset_events("model://nightly_model_validation/champion")[-1]["model_uri"] == registry["model_uri"]
    )
    assert xcom_value(dag_run, "collect_metrics")["data"]["uri"] == str(shipped_env / "logs" / f"dt={DS}")
    # the evaluate task's usage record and OpenLineage event (captured with the file transport)
    usage = xcom_value(dag_run, "evaluate", "usage")
    # the supervisor found: the driver's start is known (else the record names why)
    assert (usage["phases"]["queued_s"] or 0) > 0 or "queued" in usage["not_available"], usage
    assert usage["mode"] == "ephemeral" and usage["reserved"]["CPU"] > 0 and usage["counts"]["tasks"] >= 0
    assert json.loads((artifact / "usage.json").read_text()) == usage
    event = complete_event(openlineage_events(), "evaluate")
    inputs = {d["name"] for d in event["inputs"]}
    assert {str(shipped_env / "logs" / f"dt={DS}"), str(shipped_env / "models" / "champion.joblib")} <= inputs
    assert [d["name"] for d in event["outputs"]] == [str(artifact / "metrics.json")]
    facet = event["run"]["facets"]["rayJob"]  # OpenLineage's client leaves out None values
    assert facet["usage"]["reserved"] == usage["reserved"] and facet["submissionId"] == usage["submission_id"]


def _asset_events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri).order_by(AssetEvent.id).all()
        )  # fmt: skip
        return [dict(row.extra or {}) for row in rows]


ZONE_DAG = """
from airflow_ray_provider.templates import ClusterSettings
from airflow_ray_provider.templates.zone_training import ZoneApplication, build_zone_training_dag

ENV = {{"env_vars": {{"PYTHONPATH": {repo!r}}}}}
dag = build_zone_training_dag(
    dag_id="test_template_zone_training",
    applications=[
        ZoneApplication(
            name="eta", data_uri={eta!r}, label_column="y", max_failed_fraction=0.5, runtime_env=ENV,
            trainer="tests.fixtures.templates:flaky_ridge",
            trainer_kwargs={{"fail_zones": ["z00001", "z00004"], "marker_dir": {markers!r}}},
        ),
        ZoneApplication(name="demand", data_uri={demand!r}, label_column="y", runtime_env=ENV),
    ],
    output_uri={out!r} + "/{{{{ ds }}}}",
    cluster=ClusterSettings(local_options={{"num_cpus": 2}}),
    poll_interval=0.3,
    schedule=None,
)
"""


def test_zone_dag_one_cluster_per_application_retries_only_failed_zones(
    airflow_db: str, tmp_path: Path
) -> None:
    from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

    data = {name: make_zone_dataset(str(tmp_path / f"{name}.parquet"), 6, 60, 4, seed) for name, seed in
            (("eta", 1), ("demand", 2))}  # fmt: skip
    out = tmp_path / "zone_models"
    body = ZONE_DAG.format(repo=str(REPO_ROOT), eta=data["eta"], demand=data["demand"], out=str(out),
                           markers=str(tmp_path / "markers"))  # fmt: skip
    dag_run = run_dag(write_dag("test_template_zone_training", body), DS)
    states = task_states(dag_run)
    handles = [xcom_value(dag_run, "application.create_cluster", map_index=i) for i in (0, 1)]
    assert_heads_stopped(handles)
    assert handles[0]["name"] != handles[1]["name"]  # one cluster per application
    assert dag_run.state == "success", states
    eta, demand = (xcom_value(dag_run, "application.result", map_index=i) for i in (0, 1))
    assert (eta["failed_before_retry"], eta["failed"], eta["succeeded"], eta["retried"]) == (2, 0, 6, True)
    assert (demand["failed_before_retry"], demand["failed"], demand["retried"]) == (0, 0, False)
    # the summary shows the training job's usage beside the workload's own CPU figures
    assert demand["usage"]["reserved_cpu_h"] > 0 and demand["usage"]["mode"] == "ephemeral"
    assert demand["task_cpu_s"] > 0 and demand["trainer_cpu_s"] > 0
    assert states["application.retry_failed[0]"] == "success"
    assert states["application.retry_failed[1]"] == states["application.collect_retry[1]"] == "skipped"
    assert states["application.delete_cluster[0]"] == states["application.delete_cluster[1]"] == "success"
    import pyarrow.parquet as pq

    manifest = pq.read_table(eta["manifest"]).to_pylist()
    assert eta["manifest"].startswith(str(out / DS / "eta" / "retry-1"))
    attempts = {row["zone"]: row["attempt"] for row in manifest}
    assert {row["status"] for row in manifest} == {"succeeded"} and len(manifest) == 6
    assert attempts["z00001"] == attempts["z00004"] == 2 and attempts["z00000"] == 1


FAILING_DAG = """
from airflow_ray_provider.templates import ClusterSettings
from airflow_ray_provider.templates.champion_challenger import (
    DecisionPolicy, PrimaryMetric, build_champion_challenger_dag,
)

dag = build_champion_challenger_dag(
    dag_id="test_template_eval_failure",
    champion_uri={champion!r},
    challenger_uri={missing!r},
    data_uri={data!r},
    columns={{"label": "clicked", "group": "request_id", "slices": ["zone"]}},
    artifact_uri={out!r},
    policy=DecisionPolicy(PrimaryMetric("roc_auc")),
    cluster=ClusterSettings(local_options={{"num_cpus": 2}}),
    poll_interval=0.3,
    schedule=None,
)
"""


def test_teardown_deletes_the_cluster_when_the_evaluation_fails(airflow_db: str, tmp_path: Path) -> None:
    from airflow_ray_provider.workloads.samples.prepare import ensure_eval_data

    paths = ensure_eval_data(str(tmp_path / "data"), DS, 2000)
    body = FAILING_DAG.format(champion=paths["champion_uri"], missing=str(tmp_path / "no-such-model.joblib"),
                              data=paths["data_uri"], out=str(tmp_path / "out"))  # fmt: skip
    dag_run = run_dag(write_dag("test_template_eval_failure", body), DS)
    states = task_states(dag_run)
    assert_heads_stopped([xcom_value(dag_run, "create_cluster")])
    assert dag_run.state == "failed"
    assert states["evaluate"] == "failed" and states["delete_cluster"] == "success"
    assert states["collect_metrics"] == states["decide"] == states["promote"] == "upstream_failed"
    assert not (tmp_path / "out" / "metrics.json").exists()

"""The champion against every model file under a registry prefix, through ``dag.test()``.

Real Airflow (SQLite) and a real ephemeral local Ray head: the prefix is listed before the cluster
starts, one evaluation scores all the challengers, the decision promotes one, and the Asset event
names it. A prefix with nothing in it skips the run without starting a cluster.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fixtures.dag_runs import run_dag, task_states, write_dag, xcom_value
from tests.fixtures.templates import assert_heads_stopped

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

DS = "2026-11-28"
DAG = """
from airflow_ray_provider.templates import ClusterSettings
from airflow_ray_provider.templates.champion_challenger import (
    DecisionPolicy, PrimaryMetric, build_champion_challenger_dag,
)

dag = build_champion_challenger_dag(
    dag_id={dag_id!r},
    champion_uri={champion!r},
    challenger_prefix={prefix!r} + "/{{{{ ds }}}}",
    on_no_challengers={on_empty!r},
    data_uri={data!r},
    columns={{"label": "clicked", "group": "request_id", "slices": ["zone"]}},
    metrics=["roc_auc", "log_loss"],
    artifact_uri={out!r},
    policy=DecisionPolicy(PrimaryMetric("roc_auc", 0.002)),
    cluster=ClusterSettings(local_options={{"num_cpus": 2}}),
    evaluation_options={{"bootstrap": {{"samples": 100, "seed": 3}}, "engine": "local"}},
    poll_interval=0.3,
    schedule=None,
)
"""


def _asset_extra(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
            .all()
        )
        return [dict(row.extra or {}) for row in rows]


def test_every_model_under_the_prefix_is_evaluated_and_the_winner_is_named(
    airflow_db: str, tmp_path: Path
) -> None:
    from airflow_ray_provider.workloads.samples.prepare import ensure_eval_data

    paths = ensure_eval_data(str(tmp_path / "data"), DS, 12000)
    registry = tmp_path / "registry" / DS
    (registry / "v2").mkdir(parents=True)
    shutil.copy(paths["challenger_uri"], registry / "wide.joblib")  # the strong one
    shutil.copy(paths["champion_uri"], registry / "v2" / "same_as_champion.joblib")  # no better
    (registry / "README.txt").write_text("not a model")
    body = DAG.format(
        dag_id="test_many_challengers",
        champion=paths["champion_uri"],
        prefix=str(tmp_path / "registry"),
        on_empty="fail",
        data=paths["data_uri"],
        out=str(tmp_path / "out"),
    )
    dag_run = run_dag(write_dag("test_many_challengers", body), DS)
    states = task_states(dag_run)
    assert_heads_stopped([xcom_value(dag_run, "create_cluster")])
    assert dag_run.state == "success", states
    listed = xcom_value(dag_run, "list_challengers")
    assert sorted(listed) == ["champion", "same_as_champion", "wide"]
    decision = xcom_value(dag_run, "decide")
    assert decision["outcome"] == "promote" and decision["winner"] == "wide", decision["reasons"]
    board = {c["name"]: c for c in decision["candidates"]}
    assert board["same_as_champion"]["outcome"] != "promote" and board["same_as_champion"]["reasons"]
    assert board["wide"]["p_adjusted"] <= decision["alpha"] and decision["correction"] == "holm"
    extra = _asset_extra("model://test_many_challengers/champion")[-1]
    assert extra["winner"] == "wide" and extra["model_uri"] == str(registry / "wide.joblib")
    assert extra["challengers"] == 2
    assert "id='leaderboard'" in (tmp_path / "out" / "report.html").read_text()


def test_an_empty_prefix_skips_the_run_before_any_cluster_starts(airflow_db: str, tmp_path: Path) -> None:
    (tmp_path / "registry" / DS).mkdir(parents=True)
    body = DAG.format(
        dag_id="test_no_challengers",
        champion=str(tmp_path / "champion.joblib"),
        prefix=str(tmp_path / "registry"),
        on_empty="skip",
        data=str(tmp_path / "data"),
        out=str(tmp_path / "out"),
    )
    dag_run = run_dag(write_dag("test_no_challengers", body), DS)
    states = task_states(dag_run)
    assert states["list_challengers"] == "skipped", states
    assert states["create_cluster"] == states["evaluate"] == states["promote"] == "skipped", states
    assert not (tmp_path / "out").exists()

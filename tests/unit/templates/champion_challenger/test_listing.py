"""Challengers fixed in the DAG or listed under a prefix: graph, config, bad input at parse time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.templates.champion_challenger import (
    DecisionPolicy,
    PrimaryMetric,
    build_champion_challenger_dag,
)
from airflow_ray_provider.templates.champion_challenger.listing import (
    MODELS_PLACEHOLDER,
    models_under,
    with_listed_models,
)

pytestmark = pytest.mark.unit


def _cc(**models):
    return build_champion_challenger_dag(
        dag_id="cc_many",
        champion_uri="s3://models/champion.joblib",
        data_uri="s3://logs/dt={{ ds }}",
        columns={"label": "clicked", "group": "request_id"},  # the default metrics include ndcg
        artifact_uri="s3://ml/validation/{{ ds }}",
        policy=DecisionPolicy(PrimaryMetric("roc_auc")),
        **models,
    )


def _config(dag) -> dict:
    return json.loads(dag.get_task("evaluate").entrypoint[-1])


def test_a_fixed_list_of_challengers_is_one_evaluation_champion_first() -> None:
    dag = _cc(challengers=["s3://reg/a.joblib", "s3://reg/b.pkl", {"factory": "pkg.mod:make", "name": "c"}])
    config = _config(dag)
    models = config["models"]
    assert sorted(models) == ["a", "b", "c", "champion"] and config["baseline"] == "champion"
    assert models["b"] == {"uri": "s3://reg/b.pkl"} and models["c"] == {"factory": "pkg.mod:make"}
    assert "list_challengers" not in dag.task_ids
    named = _cc(challengers={"wide": "s3://reg/x.joblib", "deep": {"uri": "s3://reg/y.joblib"}})
    assert sorted(_config(named)["models"]) == ["champion", "deep", "wide"]


def test_a_prefix_is_listed_at_run_time_before_any_cluster_starts() -> None:
    dag = _cc(challenger_prefix="s3://registry/candidates/{{ ds }}/", on_no_challengers="skip")
    assert ("list_challengers", "create_cluster") in {
        (t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids
    }
    text = dag.get_task("evaluate").entrypoint[-1]
    assert MODELS_PLACEHOLDER not in text and "xcom_pull(task_ids='list_challengers') | tojson" in text
    spec = dag.get_task("list_challengers").op_args[0]
    assert spec == {
        "champion": "s3://models/champion.joblib",
        "prefix": "s3://registry/candidates/{{ ds }}/",
        "on_empty": "skip",
    }


@pytest.mark.parametrize(
    ("models", "match"),
    [
        ({}, "exactly one of challenger_uri"),
        ({"challenger_uri": "a.joblib", "challengers": ["b.joblib"]}, "exactly one of"),
        ({"challengers": []}, "challengers is empty"),
        ({"challengers": ["s3://x/a.joblib", "s3://y/a.joblib"]}, "two challengers are named 'a'"),
        ({"challengers": ["s3://x/champion.joblib"]}, "the champion's name"),
        ({"challenger_prefix": "s3://x/", "on_no_challengers": "ignore"}, "on_no_challengers must be one of"),
    ],
)
def test_bad_challenger_lists_fail_when_the_dag_is_parsed(models: dict, match: str) -> None:
    with pytest.raises(RayInvalidInputError, match=match):
        _cc(**models)


def test_models_under_a_prefix_are_named_after_their_files(tmp_path: Path) -> None:
    for rel in ("a.joblib", "b.pkl", "notes.txt", "v1/c.joblib", "v1/a.joblib", "v2/a.joblib"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    found = models_under(str(tmp_path))
    assert sorted(found) == ["a", "b", "c", "v1__a", "v2__a"]
    assert found["c"] == {"uri": str(tmp_path / "v1" / "c.joblib")}
    assert models_under(str(tmp_path / "missing")) == {}


def test_the_listed_models_are_rendered_into_the_config_json() -> None:
    from jinja2.sandbox import SandboxedEnvironment

    part = json.dumps({"models": MODELS_PLACEHOLDER, "data_uri": "x"})
    [rendered] = with_listed_models([part])
    pulled = {"champion": {"uri": "/m/c.joblib"}, "o'brien": {"uri": "/m/<x>.joblib"}}
    ti = type("TI", (), {"xcom_pull": staticmethod(lambda task_ids: pulled)})
    text = SandboxedEnvironment().from_string(rendered).render(ti=ti)
    assert json.loads(text) == {"models": pulled, "data_uri": "x"}

"""The DAG factories build the expected task graph; the shipped DAGs import cleanly and parse light."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.templates import ClusterSettings
from airflow_ray_provider.templates.champion_challenger import (
    DecisionPolicy,
    Guardrail,
    PrimaryMetric,
    SliceRule,
    build_champion_challenger_dag,
)
from airflow_ray_provider.templates.zone_training import ZoneApplication, build_zone_training_dag
from tests.fixtures.templates import REPO_ROOT

pytestmark = pytest.mark.unit

POLICY = DecisionPolicy(
    PrimaryMetric("roc_auc", 0.002), (Guardrail("log_loss", 0.01),), SliceRule(max_regression=0.02)
)


def _cc(**overrides):
    kwargs = dict(
        dag_id="cc",
        champion_uri="s3://models/champion.joblib",
        challenger_uri="s3://models/challenger.joblib",
        data_uri="s3://logs/clicks/dt={{ ds }}",
        columns={"label": "clicked", "group": "request_id", "slices": ["zone"]},
        artifact_uri="s3://ml/validation/{{ ds }}",
        policy=POLICY,
    )
    kwargs.update(overrides)
    return build_champion_challenger_dag(**kwargs)


def _edges(dag) -> set[tuple[str, str]]:
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def test_champion_challenger_graph_and_setup_teardown_pairing() -> None:
    dag = _cc()
    assert set(dag.task_ids) == {
        "create_cluster", "evaluate", "collect_metrics", "decide", "report", "branch", "promote",
        "keep_champion", "delete_cluster",
    }  # fmt: skip
    chain = [("create_cluster", "evaluate"), ("evaluate", "collect_metrics"), ("collect_metrics", "decide"),
             ("decide", "report"), ("report", "branch"), ("branch", "promote"), ("branch", "keep_champion"),
             ("promote", "delete_cluster"), ("keep_champion", "delete_cluster"),
             ("create_cluster", "delete_cluster")]  # fmt: skip
    assert set(chain) <= _edges(dag)
    create, delete = dag.get_task("create_cluster"), dag.get_task("delete_cluster")
    assert create.is_setup and delete.is_teardown and not dag.get_task("evaluate").is_setup
    assert create.cluster_conn_id is None and dag.schedule == "@daily" and dag.catchup is False
    assert dag.get_task("evaluate").deferrable is True
    promote = dag.get_task("promote")
    assert [a.uri for a in promote.outlets] == ["model://cc/champion"]


def test_evaluation_entrypoint_carries_the_config_inline_and_renders_the_partition() -> None:
    dag = _cc()
    evaluate = dag.get_task("evaluate")
    python, flag, module, opt, text = evaluate.entrypoint
    assert (python, flag, module, opt) == (
        sys.executable,
        "-m",
        "airflow_ray_provider.workloads.evaluate",
        "--config-json",
    )
    when = datetime(2026, 11, 28, tzinfo=timezone.utc)
    context = {"ds": "2026-11-28", "run_id": "r1", "dag": dag, "task": evaluate,
               "ti": SimpleNamespace(try_number=1), "logical_date": when,
               "dag_run": SimpleNamespace(logical_date=when, run_after=when)}  # fmt: skip
    rendered = evaluate.render_template(text, context)
    config = json.loads(rendered)
    assert config["data_uri"] == "s3://logs/clicks/dt=2026-11-28"
    assert config["output_uri"] == "s3://ml/validation/2026-11-28"
    assert config["models"] == {"champion": {"uri": "s3://models/champion.joblib"},
                                "challenger": {"uri": "s3://models/challenger.joblib"}}  # fmt: skip
    assert config["run_info"]["run_id"] == "r1"


def test_kuberay_and_existing_cluster_modes() -> None:
    kuberay = _cc(cluster_conn_id="kuberay_default", cluster_spec={"worker_groups": []})
    assert kuberay.get_task("create_cluster").cluster_conn_id == "kuberay_default"
    assert kuberay.get_task("evaluate").entrypoint[0] == "python"  # the cluster image's interpreter
    existing = _cc(ray_conn_id="ray_default", prepare_entrypoint=["python", "prep.py"])
    assert "create_cluster" not in existing.task_ids and "delete_cluster" not in existing.task_ids
    assert existing.get_task("evaluate").ray_conn_id == "ray_default"
    assert ("prepare", "evaluate") in _edges(existing)


def test_bad_policy_fails_at_parse_time() -> None:
    bad = DecisionPolicy(PrimaryMetric("ndcg@20"))
    with pytest.raises(RayInvalidInputError, match=r"uses \['ndcg@20'\].*ndcg_k=\[5, 10\]"):
        _cc(policy=bad)
    with pytest.raises(RayInvalidInputError, match="unknown keys"):
        _cc(policy={"primary": {"metric": "roc_auc", "lift": 1}})
    with pytest.raises(ValueError, match="ray_conn_id submits to an existing cluster"):
        ClusterSettings(conn_id="k", ray_conn_id="r")


def _apps():
    return [
        ZoneApplication(name="eta", data_uri="s3://zones/eta/{{ ds }}", label_column="y"),
        {
            "name": "demand",
            "data_uri": "s3://zones/demand",
            "label_column": "y",
            "trainer": "hist_gradient_boosting",
        },
    ]


def test_zone_training_maps_one_cluster_per_application() -> None:
    dag = build_zone_training_dag(dag_id="zones", applications=_apps(), output_uri="s3://ml/zones/{{ ds }}")
    group = "application."
    expected = {"plan", "create_cluster", "train", "collect_manifest", "retry_plan", "retry_failed",
                "collect_retry", "result", "delete_cluster"}  # fmt: skip
    assert set(dag.task_ids) == {group + t for t in expected}
    assert (
        dag.get_task(group + "create_cluster").is_setup and dag.get_task(group + "delete_cluster").is_teardown
    )
    tg = dag.task_group_dict["application"]
    assert [a["name"] for a in tg._expand_input.value["app"]] == ["eta", "demand"]
    edges = _edges(dag)
    for edge in [("plan", "create_cluster"), ("create_cluster", "train"), ("train", "collect_manifest"),
                 ("collect_manifest", "retry_plan"), ("retry_plan", "retry_failed"),
                 ("retry_failed", "collect_retry"), ("collect_retry", "result"),
                 ("result", "delete_cluster")]:  # fmt: skip
        assert (group + edge[0], group + edge[1]) in edges


def test_zone_training_shared_cluster_and_validation() -> None:
    dag = build_zone_training_dag(
        dag_id="zones",
        applications=_apps(),
        output_uri="/tmp/z",
        shared_cluster=True,
        retry_failed_zones=False,
    )
    assert dag.get_task("create_cluster").is_setup and dag.get_task("delete_cluster").is_teardown
    assert "application.create_cluster" not in dag.task_ids and "application.retry_failed" not in dag.task_ids
    with pytest.raises(RayInvalidInputError, match="unique"):
        build_zone_training_dag(dag_id="z", applications=[_apps()[0], _apps()[0]], output_uri="/tmp/z")
    with pytest.raises(RayInvalidInputError, match="must match"):
        ZoneApplication(name="bad name", data_uri="/d")
    with pytest.raises(RayInvalidInputError, match="shared_cluster=True"):
        build_zone_training_dag(
            dag_id="z", applications=[ZoneApplication(name="a", data_uri="/d", cluster_spec={"image": "x"})],
            output_uri="/tmp/z", shared_cluster=True,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"metrics": ["roc_auc", "acuracy"]}, "the evaluation config: unknown metric(s) ['acuracy']"),
        ({"columns": {"label": "clicked"}}, "the evaluation config: metric 'ndcg' needs a query/request id"),
        ({"ndcg_k": [0]}, "the evaluation config: ndcg_k must be a list of positive integers"),
        (
            {"evaluation_options": {"treshold": 0.3}},
            "the evaluation config: unknown config key(s) ['treshold']",
        ),
        (
            {"evaluation_options": {"engine": "gpu"}},
            "the evaluation config: config key 'engine' must be one of",
        ),
        (
            {
                "challenger_uri": None,
                "challenger_prefix": "s3://m/{{ ds }}/",
                "evaluation_options": {"threshold": 2},
            },
            "the evaluation config: config key 'threshold' must be >= 0.0 and <= 1.0, got 2",
        ),
    ],
)
def test_the_evaluation_config_is_checked_when_the_dag_is_parsed(overrides, message) -> None:
    """They used to pass parsing and fail in the evaluation job, on a cluster started for it (a metric
    typo was reported as the decision policy's, "available: []")."""
    with pytest.raises(RayInvalidInputError) as err:
        _cc(**overrides)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer": "ridgee"}, "application 'eta': unknown trainer 'ridgee'; use one of ['ridge'"),
        ({"num_cpus": 0}, "application 'eta': config key 'num_cpus' must be > 0.0, got 0"),
        ({"options": {"zone_timeout": 30}}, "application 'eta': unknown config key(s) ['zone_timeout']"),
        ({"feature_columns": ["zone"]}, "application 'eta': 'feature_columns' must not contain the zone"),
    ],
)
def test_an_applications_training_config_is_checked_when_the_dag_is_parsed(changes, message) -> None:
    """They used to pass parsing and fail in the training job, on a cluster started for it."""
    with pytest.raises(RayInvalidInputError) as err:
        ZoneApplication(name="eta", data_uri="s3://zones/eta/{{ ds }}", label_column="y", **changes)
    assert str(err.value).startswith(message)
    module_trainer = ZoneApplication(name="eta", data_uri="/d", label_column="y", trainer="team.zones:fit")
    assert module_trainer.trainer == "team.zones:fit"  # imported by the job only (its module may live there)


def test_shipped_dags_import_without_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    assert {"nightly_model_validation", "zone_training"} <= set(bag.dag_ids)
    nightly = bag.dags["nightly_model_validation"]
    assert nightly.schedule == "@daily" and nightly.catchup is False
    assert "prepare" in nightly.task_ids  # sample data on by default


def test_parsing_the_shipped_dags_imports_no_heavy_library() -> None:
    code = (
        "import runpy, sys; [runpy.run_path(p) for p in sys.argv[1:]];"
        "heavy = ('ray', 'pandas', 'pyarrow', 'sklearn', 'numpy', 'kubernetes');"
        "print('HEAVY:' + ','.join(m for m in heavy if m in sys.modules))"
    )
    files = [str(REPO_ROOT / "dags" / name) for name in ("nightly_model_validation.py", "zone_training.py")]
    out = subprocess.run(
        [sys.executable, "-c", code, *files], capture_output=True, text=True, timeout=120, check=True
    )
    assert "HEAVY:\n" in out.stdout, out.stdout[-500:]


def test_upstream_values_reach_operators_as_xcom_references_and_steps_refuse_them() -> None:
    from airflow.sdk import XComArg

    from airflow_ray_provider.templates.common import resolved

    dag = build_zone_training_dag(dag_id="zones", applications=_apps(), output_uri="s3://ml/zones")
    entrypoint = dag.get_task("application.train").entrypoint
    assert isinstance(entrypoint, XComArg)
    assert [(op.task_id, key) for op, key in entrypoint.iter_references()] == [
        ("application.plan", "entrypoint")
    ]
    delete = dag.get_task("application.delete_cluster")
    assert [op.task_id for op, _ in delete.cluster.iter_references()] == ["application.create_cluster"]
    assert resolved({"outcome": "promote"}) == {"outcome": "promote"}
    with pytest.raises(TypeError, match="Airflow resolves it only when the task runs"):
        resolved(entrypoint)


def test_job_options_and_dag_arguments_reach_the_dag() -> None:
    from airflow_ray_provider.templates.common import job_options

    dag = _cc(runtime_env={"pip": ["x"]}, job_timeout=60, deferrable=False, dag_kwargs={"tags": ["mine"]})
    evaluate = dag.get_task("evaluate")
    assert (evaluate.deferrable, evaluate.job_timeout, evaluate.runtime_env) == (False, 60, {"pip": ["x"]})
    assert (dag.tags, dag.catchup, dag.start_date.year) == ({"mine"}, False, 2000)  # dag_kwargs win
    unset = job_options(deferrable=True, poll_interval=1.0, job_timeout=None, runtime_env={})
    assert unset == {"deferrable": True, "wait_for_completion": True, "poll_interval": 1.0}


def test_a_test_or_backfill_for_an_earlier_date_gets_task_instances() -> None:
    """A fixed 2026-01-01 start date gave ``dag.test(logical_date=2025-...)`` no task instances."""
    import pendulum

    earlier = pendulum.datetime(2024, 6, 1, tz="UTC")
    zones = build_zone_training_dag(
        dag_id="z_early", applications=[{"name": "a", "data_uri": "/d"}], output_uri="/o"
    )
    for dag in (_cc(), zones):
        late = [t.task_id for t in dag.tasks if t.start_date is None or t.start_date > earlier]
        assert dag.start_date <= earlier and late == []
    own = _cc(dag_kwargs={"start_date": pendulum.datetime(2025, 1, 1, tz="UTC")})
    assert own.start_date.year == 2025  # dag_kwargs still win


def test_the_shipped_dags_poll_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``AIRFLOW_RAY_POLL_INTERVAL`` sets the shipped DAGs' job polls (tests: 0.3 s); bad values are named."""
    from airflow_ray_provider.templates import defaults

    monkeypatch.delenv("AIRFLOW_RAY_POLL_INTERVAL", raising=False)
    assert defaults.poll_interval() == 2.0
    monkeypatch.setenv("AIRFLOW_RAY_POLL_INTERVAL", "0.3")
    assert defaults.poll_interval() == 0.3
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv("AIRFLOW_RAY_POLL_INTERVAL", bad)
        with pytest.raises(ValueError, match="AIRFLOW_RAY_POLL_INTERVAL must be a positive number"):
            defaults.poll_interval()


def test_the_shipped_dags_run_on_a_pool_named_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``AIRFLOW_RAY_POOL`` selects ``pool`` mode (a local head); ``AIRFLOW_RAY_POOL_IDLE_TTL`` is checked."""
    from airflow_ray_provider.templates import defaults

    for name in (
        "AIRFLOW_RAY_CONN_ID",
        "AIRFLOW_RAY_MODE",
        "AIRFLOW_RAY_CLUSTER_CONN_ID",
        "AIRFLOW_RAY_CLUSTER_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_RAY_POOL", "nightly")
    monkeypatch.setenv("AIRFLOW_RAY_POOL_IDLE_TTL", "0")
    settings = defaults.cluster_settings()
    assert settings.resolved_mode == "pool" and settings.pool == {"name": "nightly", "idle_ttl": 0.0}
    assert settings.local_options == {"num_cpus": 4}
    monkeypatch.delenv("AIRFLOW_RAY_POOL_IDLE_TTL")
    assert defaults.cluster_settings().pool == {"name": "nightly", "idle_ttl": 600.0}
    for bad in ("-1", "later"):
        monkeypatch.setenv("AIRFLOW_RAY_POOL_IDLE_TTL", bad)
        with pytest.raises(ValueError, match="AIRFLOW_RAY_POOL_IDLE_TTL must be 0 or more seconds"):
            defaults.cluster_settings()

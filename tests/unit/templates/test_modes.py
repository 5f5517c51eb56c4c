"""One ``ClusterSettings.mode`` switches both templates between ephemeral, RayJob, standing, one task and
pool."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.templates import ClusterSettings
from airflow_ray_provider.templates.champion_challenger import (
    DecisionPolicy,
    PrimaryMetric,
    build_champion_challenger_dag,
)
from airflow_ray_provider.templates.zone_training import ZoneApplication, build_zone_training_dag

pytestmark = pytest.mark.unit

SPEC = {"worker_groups": [{"name": "cpu", "replicas": 1, "cpu": "2", "memory": "4Gi"}]}


def _cc(settings: ClusterSettings):
    return build_champion_challenger_dag(
        dag_id="cc_modes", champion_uri="s3://m/a.joblib", challenger_uri="s3://m/b.joblib",
        data_uri="s3://logs/dt={{ ds }}", columns={"label": "clicked", "group": "request_id"},
        artifact_uri="s3://ml/{{ ds }}", policy=DecisionPolicy(PrimaryMetric("roc_auc", 0.001)),
        metrics=["roc_auc"], prepare_entrypoint=["python", "prep.py"], job_timeout=600.5, cluster=settings,
    )  # fmt: skip


def _zones(settings: ClusterSettings, **kwargs):
    apps = [ZoneApplication(name="eta", data_uri="s3://z/eta.parquet", label_column="y")]
    return build_zone_training_dag(
        dag_id="zone_modes", applications=apps, output_uri="s3://out", cluster=settings, **kwargs
    )


def _kinds(dag) -> dict[str, str]:
    return {t.task_id: type(t).__name__ for t in dag.tasks if t.task_id in RAY_TASKS}


RAY_TASKS = {"prepare", "evaluate", "application.prepare", "application.train", "application.retry_failed"}


def test_champion_challenger_in_every_mode():
    rayjob = _cc(ClusterSettings(mode="rayjob", conn_id="kuberay_prod", spec=SPEC))
    assert _kinds(rayjob) == {"prepare": "KubeRayJobOperator", "evaluate": "KubeRayJobOperator"}
    assert not {"create_cluster", "delete_cluster"} & set(rayjob.task_ids)
    evaluate = rayjob.get_task("evaluate")
    assert evaluate.spec == SPEC and evaluate.active_deadline_seconds == 601  # job_timeout, rounded up
    assert evaluate.entrypoint[0] == "python"  # in-cluster interpreter

    standing = _cc(ClusterSettings(cluster_name="team-ray", conn_id="kuberay_prod"))
    assert _kinds(standing) == {"prepare": "SubmitRayJobOperator", "evaluate": "SubmitRayJobOperator"}
    assert "attach_cluster" in standing.task_ids and "delete_cluster" not in standing.task_ids
    assert "prepare" in standing.get_task("attach_cluster").downstream_task_ids

    one_task = _cc(ClusterSettings(mode="one_task", local_options={"num_cpus": 2}))
    assert _kinds(one_task) == {"prepare": "EphemeralRayJobOperator", "evaluate": "EphemeralRayJobOperator"}
    assert one_task.get_task("evaluate").local_options == {"num_cpus": 2}
    assert not {"create_cluster", "delete_cluster", "attach_cluster"} & set(one_task.task_ids)

    ephemeral = _cc(ClusterSettings())
    assert {"create_cluster", "delete_cluster"} <= set(ephemeral.task_ids)

    pooled = _cc(ClusterSettings(pool={"name": "nightly", "idle_ttl": 900}, spec=SPEC))
    assert _kinds(pooled) == {"prepare": "EphemeralRayJobOperator", "evaluate": "EphemeralRayJobOperator"}
    assert not {"create_cluster", "delete_cluster", "attach_cluster"} & set(pooled.task_ids)
    for task_id in ("prepare", "evaluate"):  # both jobs lease the one pool, of the DAG's spec
        task = pooled.get_task(task_id)
        assert (task.cluster_pool.name, task.cluster_pool.idle_ttl, task.cluster_spec) == (
            "nightly",
            900,
            SPEC,
        )


def test_zone_training_in_every_mode():
    rayjob = _zones(ClusterSettings(mode="rayjob", conn_id="kuberay_prod", spec=SPEC))
    kinds = _kinds(rayjob)
    assert kinds == {"application.train": "KubeRayJobOperator",
                     "application.retry_failed": "RetryFailedZonesRayJobOperator"}  # fmt: skip
    assert "application.create_cluster" not in rayjob.task_ids

    one_task = _zones(ClusterSettings(mode="one_task"))
    assert _kinds(one_task)["application.retry_failed"] == "RetryFailedZonesOneTaskOperator"

    standing = _zones(ClusterSettings(cluster_name="team-ray"))  # a running local head, by name
    assert "attach_cluster" in standing.task_ids and "delete_cluster" not in standing.task_ids
    assert _kinds(standing)["application.train"] == "SubmitRayJobOperator"

    with pytest.raises(RayInvalidInputError, match="shared_cluster=True creates one cluster"):
        _zones(ClusterSettings(mode="rayjob", conn_id="kuberay_prod"), shared_cluster=True)

    pooled = _zones(ClusterSettings(mode="pool", pool={"name": "zones"}))
    assert _kinds(pooled) == {"application.train": "EphemeralRayJobOperator",
                              "application.retry_failed": "RetryFailedZonesOneTaskOperator"}  # fmt: skip
    assert pooled.get_task("application.retry_failed").cluster_pool.name == "zones"
    assert "application.create_cluster" not in pooled.task_ids
    with pytest.raises(RayInvalidInputError, match="shared_cluster=True creates one cluster"):
        _zones(ClusterSettings(pool={"name": "zones"}), shared_cluster=True)


def test_zone_training_on_a_pool_refuses_per_application_specs_when_built():
    apps = [ZoneApplication(name="eta", data_uri="s3://z/eta.parquet", label_column="y", cluster_spec=SPEC)]
    with pytest.raises(RayInvalidInputError, match="mode='pool' runs every application on the pool's one"):
        build_zone_training_dag(
            dag_id="zone_pool", applications=apps, output_uri="s3://out",
            cluster=ClusterSettings(pool={"name": "zones"}),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"mode": "rayjob"}, "set conn_id to a kuberay connection"),
        ({"mode": "rayjob", "conn_id": "k", "local_options": {"num_cpus": 2}}, "drop local_options"),
        ({"mode": "standing"}, "needs cluster_name"),
        ({"mode": "standing", "cluster_name": "x", "spec": SPEC}, "drop spec"),
        ({"mode": "one_task", "cluster_name": "x"}, "makes its own clusters"),
        ({"mode": "serverless"}, "mode must be one of"),
        ({"ray_conn_id": "ray", "cluster_name": "x"}, "ray_conn_id submits to an existing cluster"),
        ({"mode": "pool"}, r"mode='pool' needs pool=\{'name': ...\}"),
        ({"mode": "one_task", "pool": {"name": "p"}}, "use mode='pool' or drop pool"),
        ({"pool": {"name": "p"}, "cluster_name": "x"}, "but mode='standing': use mode='pool'"),
    ],
)
def test_settings_a_mode_cannot_run_are_refused(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        ClusterSettings(**kwargs)


def test_the_mode_defaults_from_what_is_set():
    assert ClusterSettings().resolved_mode == "ephemeral"
    assert ClusterSettings(ray_conn_id="ray").resolved_mode == "standing"
    assert ClusterSettings(cluster_name="team-ray").resolved_mode == "standing"
    assert ClusterSettings(pool={"name": "p"}).resolved_mode == "pool"

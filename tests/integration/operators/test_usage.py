"""The usage record on a real local head with fake GPUs (``num_gpus=1``: Ray counts what it is told).

The job's tasks request known resources and time their own bodies; its GPU actor notes when it was
made and killed. The record, read from the dashboard's state API, must agree with those figures.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from tests.fixtures.openlineage import complete_event, openlineage_events_fixture  # noqa: F401 (a fixture)
from tests.fixtures.ray_job import StandInTI, context_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JOB = """
import json, time, ray
ray.init()

@ray.remote(num_cpus=1)
def work(seconds):
    start = time.time()
    while time.time() - start < seconds:
        pass
    return time.time() - start

@ray.remote(num_gpus=1, num_cpus=0)
class Holder:
    def ready(self):
        return ray.get_gpu_ids()

made = time.time()
holder = Holder.remote()
gpus = ray.get(holder.ready.remote())
ready = time.time()
bodies = ray.get([work.remote(1.5) for _ in range(4)])
ray.kill(holder)
killed = time.time()
print("USAGE-TEST " + json.dumps({"cpu_s": sum(bodies), "gpus": gpus, "made": made, "ready": ready,
                                  "killed": killed}), flush=True)
"""


@pytest.fixture(scope="module")
def gpu_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local head offering 2 CPUs and 1 (fake) GPU, stopped at the module's end."""
    from airflow_ray_provider.local import LocalHeadConfig, start_head, stop_head

    info = start_head(LocalHeadConfig(num_cpus=2, num_gpus=1, auth=True), name="usage-gpu")
    try:
        yield info
    finally:
        stop_head(info)


def _handle(head: Any) -> dict[str, Any]:
    from airflow_ray_provider.clusters import RayClusterHandle

    return RayClusterHandle(
        backend="local", name=head.name, dashboard_url=head.dashboard_url, auth_token_file=head.token_file
    ).to_dict()  # owned: the run's own cluster, so reserved is the whole head


def _operator(head: Any, dag_id: str, **kwargs: Any) -> Any:
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    return SubmitRayJobOperator(
        task_id="submit", cluster=_handle(head), entrypoint=["python", "-c", JOB], poll_interval=0.2,
        **kwargs,
    )  # fmt: skip


def test_record_matches_what_the_tasks_and_the_gpu_actor_held(gpu_head: Any, tmp_path: Path) -> None:
    dag_id = f"usage_{uuid.uuid4().hex[:6]}"
    op = _operator(gpu_head, dag_id, prices={"CPU": 0.05, "GPU": 2.0}, artifact_uri=str(tmp_path / "art"))
    ti = StandInTI(dag_id=dag_id)
    result = op.execute(context_for(ti))
    record = ti.xcoms["usage"]
    text = op.run.target.dashboard().get_logs(result["submission_id"])
    seen = json.loads(re.search(r"^USAGE-TEST (\{.*\})$", text, re.M).group(1))  # type: ignore[union-attr]
    job = op.run.target.dashboard().get_job(result["submission_id"])
    assert job is not None and job.start_time and job.end_time
    ran_h = (job.end_time - job.start_time) / 3_600_000

    assert record["counts"] == {"tasks": 4, "actors": 1} and record["ray_job_id"], record["not_available"]
    allocated_cpu_s = record["allocated"]["CPU"] * 3600
    assert allocated_cpu_s == pytest.approx(seen["cpu_s"], rel=0.10), (allocated_cpu_s, seen)
    gpu_s = record["allocated"]["GPU"] * 3600
    # The actor's end comes from the dashboard; one that never timed it (seen in CI on a head that took
    # 21 s to start) is counted from its creation task's end to the job's end, and the record says so.
    timed_by_creation = "actors_timed_by_creation" in record["not_available"]
    counted_to = job.end_time / 1000 if timed_by_creation else seen["killed"]
    assert seen["killed"] - seen["ready"] - 0.1 <= gpu_s <= counted_to - seen["made"] + 1.0, (
        gpu_s,
        seen,
        record,
    )
    assert seen["gpus"] == [0]
    # the whole head, from submission to the job's end: 2 CPUs and 1 GPU
    assert record["basis"] == "cluster" and record["mode"] == "ephemeral"
    assert record["reserved"]["CPU"] == pytest.approx(2 * ran_h, rel=0.02)
    assert record["reserved"]["GPU"] == pytest.approx(ran_h, rel=0.02)
    assert record["utilisation"]["allocated_cpu"] == pytest.approx(
        record["allocated"]["CPU"] / record["reserved"]["CPU"], abs=1e-3
    )
    assert record["cost"]["amount"] == pytest.approx(
        record["reserved"]["CPU"] * 0.05 + record["reserved"]["GPU"] * 2.0, rel=1e-3
    )
    assert record["phases"]["queued_s"] is not None and record["phases"]["running_s"] > 1.5
    # The dashboard may hold the supervisor without its name (see find_supervisor): found by id then.
    from airflow_ray_provider.launch.usage import UsageOptions
    from airflow_ray_provider.launch.usage.observer import (
        SUPERVISOR_PREFIX,
        collect_usage,
        creation_starts,
        find_supervisor,
        job_actors,
        logical_actors,
        state_list,
    )
    from airflow_ray_provider.launch.usage.record import record_resources

    reader = op.run.target.dashboard().reader()  # the Job API client reads the record
    actors = logical_actors(reader)
    named = [a for a in actors if a.get("name") == SUPERVISOR_PREFIX + result["submission_id"]]
    nameless = [{k: v for k, v in a.items() if k != "name"} for a in actors]
    found = find_supervisor(reader, result["submission_id"], nameless, missing := {})
    assert named and found is not None and found["actorId"] == named[0]["actorId"] and not missing
    assert found["startTime"] == named[0]["startTime"]
    # The dashboard may hold the GPU actor without job, class and resources (stored from a state change):
    # the GCS's rows mend it, by id.
    gcs_rows, cut = state_list(reader, "/api/v0/actors", ("job_id", record["ray_job_id"]))
    # The head also holds the supervisor's actor (another job): filtered out, which is not a cut.
    assert cut is None and len(gcs_rows) == 1, (cut, gcs_rows)
    assert not {"gcs_actors_truncated", "tasks_truncated"} & set(record["not_available"]), record
    assert record_resources(gcs_rows[0]["required_resources"]) == {"GPU": 1.0} and gcs_rows[0]["pid"]
    # What the record falls back on when the dashboard never times the actor, read from the live head:
    # the creation task's end (reported by the driver, not by the killed actor's worker).
    starts = creation_starts(state_list(reader, "/api/v0/tasks", ("job_id", record["ray_job_id"]))[0])
    alive = starts[gcs_rows[0]["actor_id"]] / 1000
    assert seen["made"] - 0.05 <= alive <= seen["ready"] + 0.05, (alive, seen)
    stripped = [{**a, "jobId": "", "className": "", "requiredResources": {}} for a in actors]
    mended = job_actors(stripped, gcs_rows, record["ray_job_id"], missing, lambda: None)
    mine = [a for a in actors if a.get("jobId") == record["ray_job_id"] and a.get("startTime")]
    if mine or not timed_by_creation:  # else: the dashboard still has no timed row of it to mend
        mended_resources = [record_resources(a["requiredResources"]) for a in mended]
        classes = [a["className"] for a in mended]
        assert classes == [a["className"] for a in mine] == ["Holder"] and not missing
        assert mended_resources == [record_resources(a["requiredResources"]) for a in mine] == [{"GPU": 1.0}]
    # A dashboard that never lists the actor: the live record counts it from its creation to the job's end.
    holder_id = gcs_rows[0]["actor_id"]

    class Lossy:  # the dashboard's actor list without the GPU actor
        def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
            body = reader.get_json(path, params)
            if path == "/logical/actors":
                body["data"]["actors"].pop(holder_id, None)
            return body

    lossy = Lossy()
    again = collect_usage(
        lossy, UsageOptions("ephemeral", gpu_head.name, True, submission_id=result["submission_id"])
    )
    assert again["counts"] == {"tasks": 4, "actors": 1}, again["not_available"]
    assert "Holder" in again["not_available"]["actors_timed_by_creation"]
    assert again["allocated"]["GPU"] * 3600 == pytest.approx(job.end_time / 1000 - alive, abs=0.01)
    assert json.loads((tmp_path / "art" / "usage.json").read_text()) == record

    lineage = op.get_openlineage_facets_on_complete(None)
    facet = lineage.run_facets["rayJob"]
    assert (facet.jobId, facet.submissionId, facet.mode) == (
        record["ray_job_id"],
        result["submission_id"],
        "ephemeral",
    )
    assert facet.usage == record


def test_a_price_for_a_resource_the_cluster_lacks_fails_before_submit(gpu_head: Any) -> None:
    dag_id = f"usage_bad_{uuid.uuid4().hex[:6]}"
    op = _operator(gpu_head, dag_id, prices={"CPU": 0.05, "TPU": 4.0})
    with pytest.raises(RayInvalidInputError, match=r"\['TPU'\].*does not have"):
        op.execute(context_for(StandInTI(dag_id=dag_id)))
    assert not [job for job in op.run.target.dashboard().list_jobs() if dag_id in job.submission_id]


def test_dag_run_emits_openlineage_with_the_ray_job_and_its_usage(
    airflow_db: str, ray_conn_id: str, job_prefix: str, openlineage_events: Any, tmp_path: Path
) -> None:
    from tests.fixtures.dag_runs import write_dag_module

    source = f"""
import pendulum
from airflow.sdk import DAG
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

with DAG({job_prefix!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:
    SubmitRayJobOperator(task_id="submit", ray_conn_id={ray_conn_id!r}, poll_interval=0.3,
                         entrypoint=["python", "-c", "import ray; ray.init()"], lineage_inputs=["s3://logs/clicks"],
                         lineage_outputs=[{str(tmp_path / "out")!r}])
"""
    module = write_dag_module(job_prefix, source)
    when = pendulum.datetime(2024, 1, 3, tz="UTC")
    dag_run = module.dag.test(logical_date=when, run_after=when)
    assert dag_run.state == "success"
    event = complete_event(openlineage_events(), "submit")
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("s3://logs", "clicks")]
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", str(tmp_path / "out"))]
    facet = event["run"]["facets"]["rayJob"]
    assert facet["mode"] == "standing" and facet["submissionId"].startswith("airflow-")
    assert facet["usage"]["submission_id"] == facet["submissionId"]
    assert facet["jobId"] == facet["usage"]["ray_job_id"] and facet["jobId"]
    assert facet["usage"]["basis"] == "job requests"


def test_zone_summary_and_usage_record_agree_on_the_cpu_seconds_the_tasks_held(
    ray_conn_id: str, zone_config: Any, tmp_path: Path
) -> None:
    """Apples to apples: the zone summary's ``task_cpu_s`` (its training tasks' own wall seconds x
    ``num_cpus``) and the record's allocated CPU-seconds of those tasks (Ray's ``task:execute`` spans x
    the same request) count the same thing; the trainer's CPU seconds (``process_time`` of the fits) are
    a part of it."""
    import sys

    from airflow_ray_provider.operators.lineage import ZONE_MODULE
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
    from airflow_ray_provider.templates.collect import CollectZoneTrainingOperator

    cfg = zone_config(
        trainer="tests.fixtures.zone_training:zone_busy_trainer", trainer_kwargs={"spin_s": 0.04},
        batching={"target_task_seconds": 0.3, "probe_zones": 2}, engine="ray",
    )  # fmt: skip
    entrypoint = [sys.executable, "-m", ZONE_MODULE, "--config-json", json.dumps(cfg)]
    op = SubmitRayJobOperator(
        task_id="train", ray_conn_id=ray_conn_id, entrypoint=entrypoint, poll_interval=0.2
    )
    ti = StandInTI(dag_id=f"usage_zone_{uuid.uuid4().hex[:6]}")
    op.execute(context_for(ti))
    record = ti.xcoms["usage"]
    collect = CollectZoneTrainingOperator(
        task_id="collect", artifact_uri=cfg["output_uri"], application="test-app"
    )
    summary = collect.execute(context_for(StandInTI(dag_id=ti.dag_id, task_id="collect")))

    allocated_s = record["allocated"]["CPU"] * 3600
    assert summary["usage"]["allocated_cpu_s"] == pytest.approx(allocated_s, abs=0.01)  # usage.json was read
    assert summary["task_cpu_s"] > 0.5 and record["counts"]["tasks"] >= 2
    # The record counts every task of the job (here also the staging task of the shuffled file): its
    # by-function figure for the training tasks is the one to compare.
    training_s = record["allocated_cpu_s_by_function"]["_batch_task"]
    assert summary["usage"]["function_cpu_s"] == training_s
    run = json.loads((Path(cfg["output_uri"]) / "summary.json").read_text())["run"]
    if "tasks_unsettled" in record["not_available"]:  # a worker's last events never came: those tasks
        # count start to end, more than they ran
        assert training_s > summary["task_cpu_s"], (training_s, run["tasks"], record["not_available"])
    elif "tasks_timed_by_owner" in record["not_available"]:  # a worker's events lost: those tasks count
        # from the owner's push to the reply, an upper bound (a worker's first task: its function's load too)
        assert training_s >= summary["task_cpu_s"] * 0.95, (training_s, run["tasks"], record["not_available"])
    else:  # Ray delivered every task's events
        assert training_s == pytest.approx(summary["task_cpu_s"], rel=0.05), (training_s, run["tasks"])
    assert sum(record["allocated_cpu_s_by_function"].values()) == pytest.approx(allocated_s, rel=0.01)
    assert 0 < summary["trainer_cpu_s"] <= training_s * 1.05  # CPU used inside what the tasks held

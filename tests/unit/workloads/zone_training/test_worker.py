"""One training task, in-process (the same code a Ray worker runs): failures stay per zone."""

from __future__ import annotations

import json
import os

import joblib
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from airflow_ray_provider.workloads.zone_training import worker as zone_worker
from airflow_ray_provider.workloads.zone_training.worker import (
    THREAD_ENV_VARS,
    WorkerContext,
    ZoneWork,
    run_batch,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_thread_budget(monkeypatch: pytest.MonkeyPatch):
    """run_batch caps this process's math threads, as it does a worker's: undo it after each test."""
    from threadpoolctl import threadpool_limits

    for var in THREAD_ENV_VARS:
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored (or removed) by monkeypatch
        if not os.environ[var]:
            monkeypatch.delenv(var)
    with threadpool_limits(limits=None):
        yield
    zone_worker._applied_threads = None


def make_table(zones: dict[str, int]) -> pa.Table:
    """Rows sorted by zone, zone column dropped (as staging leaves them); y = 2*f0 + f1."""
    f0, f1 = [], []
    for n in zones.values():
        f0 += [float(i) for i in range(n)]
        f1 += [float(i % 3) for i in range(n)]
    y = [2 * a + b for a, b in zip(f0, f1, strict=True)]
    return pa.table({"y": y, "f0": f0, "f1": f1})


def work_items(zones: dict[str, int]) -> list[ZoneWork]:
    items, start = [], 0
    for key, n in zones.items():
        items.append(ZoneWork(key, n, ((0, start, n),), attempt=1))
        start += n
    return items


def context(tmp_path, **changes) -> WorkerContext:
    base = dict(
        fs=pafs.LocalFileSystem(),
        zone_column="zone",
        label_column="y",
        feature_columns=["f0", "f1"],
        file_columns=["zone", "y", "f0", "f1"],
        models_uri=str(tmp_path / "models"),
        trainer="ridge",
        trainer_kwargs={"alpha": 1e-6},
    )
    base.update(changes)
    return WorkerContext(**base)


def test_each_zone_gets_its_own_model_and_metrics(tmp_path) -> None:
    zones = {"a": 30, "b/c": 50}
    out = run_batch(context(tmp_path), work_items(zones), [make_table(zones)])
    rows = {r["zone"]: r for r in out["results"]}
    assert out["rows"] == 80 and out["task_s"] > 0 and out["task_cpu_s"] > 0
    assert [rows[z]["rows"] for z in zones] == [30, 50]
    for key in zones:
        assert rows[key]["status"] == "succeeded" and rows[key]["error"] is None
        metrics = json.loads(rows[key]["metrics"])
        assert metrics["r2"] > 0.999 and metrics["train_rows"] + metrics["validation_rows"] == zones[key]
        model = joblib.load(rows[key]["artifact"])
        assert list(model.feature_names_in_) == ["f0", "f1"]
        assert model.coef_[0] == pytest.approx(2.0, abs=1e-3)
    assert rows["b/c"]["artifact"].endswith("models/b%2Fc.joblib")


def test_failing_zone_does_not_stop_its_batch_and_retries_count(tmp_path) -> None:
    zones = {"a": 20, "bad": 20, "c": 20}
    ctx = context(
        tmp_path,
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["bad"]},
        zone_retries=2,
    )
    rows = {r["zone"]: r for r in run_batch(ctx, work_items(zones), [make_table(zones)])["results"]}
    assert [rows[z]["status"] for z in zones] == ["succeeded", "failed", "succeeded"]
    assert rows["bad"]["error"] == "ValueError: bad data in zone bad (after 3 tries)"
    assert rows["bad"]["artifact"] is None and not os.path.exists(tmp_path / "models" / "bad.joblib")


class RecordingClock:
    """A zone clock that records what a task marks on it (a task's view of ``zone_timeout_s``)."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, int | None]] = []

    def start(self, index: int) -> None:
        self.marks.append(("start", index))

    def stop(self) -> None:
        self.marks.append(("stop", None))


def test_every_try_of_every_zone_is_marked_on_the_zone_clock(tmp_path) -> None:
    zones = {"a": 20, "bad": 20, "c": 20}
    ctx = context(
        tmp_path,
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["bad"]},
        zone_retries=1,
        zone_timeout_s=30.0,
    )
    clock = RecordingClock()
    rows = {
        r["zone"]: r for r in run_batch(ctx, work_items(zones), [make_table(zones)], clock=clock)["results"]
    }
    assert [rows[z]["status"] for z in zones] == ["succeeded", "failed", "succeeded"]
    starts = [index for mark, index in clock.marks if mark == "start"]
    assert starts == [0, 1, 1, 2]  # the failing zone's two tries, each marked
    assert clock.marks[1::2] == [("stop", None)] * 4  # every start is followed by its stop, also on errors


def test_bad_trainer_result_and_bad_batch_are_recorded_as_failures(tmp_path) -> None:
    zones = {"a": 10}
    ctx = context(tmp_path, trainer="tests.fixtures.zone_training:zone_bad_return_trainer")
    (res,) = run_batch(ctx, work_items(zones), [make_table(zones)])["results"]
    assert res["status"] == "failed" and "must return (model, metrics)" in res["error"]
    (res,) = run_batch(context(tmp_path), work_items(zones), [])["results"]  # chunk missing
    assert res["status"] == "failed" and res["error"].startswith("could not prepare the batch")


def test_thread_budget_is_applied_inside_the_zone(tmp_path) -> None:
    zones = {"a": 20}
    ctx = context(tmp_path, trainer="tests.fixtures.zone_training:zone_env_trainer", threads=1)
    (res,) = run_batch(ctx, work_items(zones), [make_table(zones)])["results"]
    metrics = json.loads(res["metrics"])
    assert metrics["OMP_NUM_THREADS"] == metrics["OPENBLAS_NUM_THREADS"] == metrics["MKL_NUM_THREADS"] == 1
    assert metrics["max_pool_threads"] == 1


def test_unwritable_models_dir_fails_each_zone_and_leaves_no_temporary_files(tmp_path) -> None:
    zones = {"a": 20, "b": 20}
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "b.joblib").mkdir()  # a directory where b's model file should go
    out = run_batch(context(tmp_path), work_items(zones), [make_table(zones)])
    rows = {r["zone"]: r for r in out["results"]}
    assert rows["a"]["status"] == "succeeded" and os.path.isfile(rows["a"]["artifact"])
    assert rows["b"]["status"] == "failed" and rows["b"]["artifact"] is None
    assert rows["b"]["error"].startswith("could not save the model or metrics: ArtifactError")
    assert sorted(os.listdir(tmp_path / "models")) == ["a.joblib", "b.joblib"]  # no .tmp leftovers


def test_zones_across_several_fit_then_write_groups_keep_their_order_and_models(tmp_path) -> None:
    zones = {f"z{i:03d}": 10 + i % 7 for i in range(2 * zone_worker.GROUP_ZONES + 5)}
    ctx = context(
        tmp_path,
        trainer="tests.fixtures.zone_training:zone_flaky_trainer",
        trainer_kwargs={"fail_zones": ["z040"]},
    )
    out = run_batch(ctx, work_items(zones), [make_table(zones)])
    assert [r["zone"] for r in out["results"]] == list(zones)
    assert [r["rows"] for r in out["results"]] == list(zones.values())
    failed = [r["zone"] for r in out["results"] if r["status"] != "succeeded"]
    assert failed == ["z040"]
    written = sorted(os.listdir(tmp_path / "models"))
    assert written == sorted(f"{z}.joblib" for z in zones if z != "z040")
    start, end = out["wall"]
    assert end - start == pytest.approx(out["task_s"], abs=0.05)


def test_a_zone_part_is_indexed_from_zero_and_writes_to_it_leave_the_batch_alone() -> None:
    import pandas as pd

    batch = pd.DataFrame({"y": [float(i) for i in range(10)], "f0": list(range(10))})
    part = zone_worker.zone_part(batch, 3, 7)
    assert list(part.index) == [0, 1, 2, 3] and part["y"].tolist() == [3.0, 4.0, 5.0, 6.0]
    part.loc[0, "y"] = -1.0
    assert batch.loc[3, "y"] == 3.0 and list(batch.index) == list(range(10))


def test_builtin_trainers_take_the_array_path_and_build_no_dataframe(tmp_path, monkeypatch) -> None:
    def no_frame(*args, **kwargs):
        raise AssertionError("a DataFrame was built for an array trainer")

    monkeypatch.setattr(zone_worker, "build_frame", no_frame)
    zones = {"a": 30, "b": 50}
    out = run_batch(context(tmp_path), work_items(zones), [make_table(zones)])
    assert [r["status"] for r in out["results"]] == ["succeeded", "succeeded"]
    model = joblib.load(out["results"][1]["artifact"])
    assert model.coef_[0] == pytest.approx(2.0, abs=1e-3) and list(model.feature_names_in_) == ["f0", "f1"]


def test_custom_array_trainer_gets_float64_views_and_fails_per_zone(tmp_path) -> None:
    zones = {"a": 30, "b": 17, "c": 40}
    table = make_table(zones).set_column(1, "f0", pa.array([float(i % 30) for i in range(87)], pa.int32()))
    ctx = context(
        tmp_path,
        trainer="tests.fixtures.zone_training:zone_array_trainer",
        trainer_kwargs={"fail_rows": [17]},
    )
    rows = {r["zone"]: r for r in run_batch(ctx, work_items(zones), [table])["results"]}
    assert [rows[z]["status"] for z in zones] == ["succeeded", "failed", "succeeded"]
    assert rows["b"]["error"] == "ValueError: bad zone of 17 rows"
    metrics = json.loads(rows["c"]["metrics"])
    assert metrics["x_is_float64_array"] and metrics["x_shares_the_batch_block"]
    assert metrics["feature_names"] == "f0,f1" and metrics["train_rows"] + metrics["validation_rows"] == 40


def test_dataframe_trainers_still_get_a_dataframe_and_array_trainers_accept_one(tmp_path) -> None:
    import pandas as pd

    from airflow_ray_provider.workloads.zone_training.trainers import array_entry, load_trainer

    seen: list[type] = []

    def frame_trainer(frame, *, label_column, feature_columns, **kwargs):
        seen.append(type(frame))
        assert list(frame.columns) == ["zone", "y", "f0", "f1"] and frame["zone"].iloc[0] == "a"
        return load_trainer("ridge")(frame, label_column=label_column, feature_columns=feature_columns)

    assert array_entry(frame_trainer) is None and array_entry(load_trainer("ridge")) is not None
    zone_worker._trainers["frame-trainer"] = frame_trainer
    try:
        zones = {"a": 30}
        (res,) = run_batch(
            context(tmp_path, trainer="frame-trainer"), work_items(zones), [make_table(zones)]
        )["results"]
    finally:
        del zone_worker._trainers["frame-trainer"]
    assert seen == [pd.DataFrame] and res["status"] == "succeeded"
    assert json.loads(res["metrics"])["r2"] > 0.999

"""Bad input fails with a clear error before Ray is touched (ray_address points nowhere to prove it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ray_provider.workloads.common.errors import ArtifactError, ConfigError, DataError
from airflow_ray_provider.workloads.samples.zones import make_zone_dataset
from airflow_ray_provider.workloads.zone_training.capacity import (
    local_cpus,
    scales_from_status,
    wait_for_capacity,
)
from airflow_ray_provider.workloads.zone_training.config import parse_config
from airflow_ray_provider.workloads.zone_training.dataset import inspect_dataset
from airflow_ray_provider.workloads.zone_training.manifest import (
    COLUMNS,
    EXTRA_COLUMNS,
    build_table,
    manifest_row,
)
from airflow_ray_provider.workloads.zone_training.run import main, run_zone_training

pytestmark = pytest.mark.unit

NOWHERE = "127.0.0.1:9"  # a run that got past validation would fail to connect here instead


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return make_zone_dataset(str(tmp_path_factory.mktemp("bad") / "d.parquet"), 5, 20, features=3, seed=0)


def config(tmp_path, data_uri: str, **changes) -> dict:
    cfg = {
        "application": "app",
        "data_uri": data_uri,
        "zone_column": "zone",
        "label_column": "y",
        "output_uri": str(tmp_path / "out"),
        "ray_address": NOWHERE,
    }
    cfg.update(changes)
    return cfg


def assert_rejected(raw: dict, error: type[Exception], message: str, only_failed: str | None = None) -> None:
    import ray

    with pytest.raises(error) as err:
        run_zone_training(parse_config(raw), only_failed=only_failed)
    assert message in str(err.value)
    assert not ray.is_initialized()


def test_missing_zone_column(tmp_path, data) -> None:
    assert_rejected(
        config(tmp_path, data, zone_column="region"), DataError, "zone_column 'region' is not a column"
    )


def test_missing_feature_column(tmp_path, data) -> None:
    raw = config(tmp_path, data, feature_columns=["f0", "nope"])
    assert_rejected(raw, DataError, "feature_columns ['nope'] are not columns")


def test_nulls_in_zone_column(tmp_path) -> None:
    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"zone": ["a", None, "b"], "y": [1.0, 2.0, 3.0], "f0": [1.0, 2.0, 3.0]}), path)
    assert_rejected(config(tmp_path, path), DataError, "1 of 3 rows have a null zone in column 'zone'")


def test_empty_dataset(tmp_path) -> None:
    path = str(tmp_path / "empty.parquet")
    schema = pa.schema([("zone", pa.string()), ("y", pa.float64()), ("f0", pa.float64())])
    pq.write_table(schema.empty_table(), path)
    assert_rejected(config(tmp_path, path), DataError, "is empty (0 rows)")


def test_missing_dataset(tmp_path) -> None:
    assert_rejected(config(tmp_path, str(tmp_path / "nope")), DataError, "does not exist")


def test_non_numeric_features_with_a_builtin_trainer(tmp_path) -> None:
    path = str(tmp_path / "text.parquet")
    pq.write_table(pa.table({"zone": ["a"], "y": [1.0], "city": ["x"]}), path)
    assert_rejected(config(tmp_path, path), DataError, "feature columns ['city'] are not numeric")


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        ("xgboost_magic", "unknown trainer 'xgboost_magic'"),
        ("no_such_pkg.mod:train", "module 'no_such_pkg.mod' cannot be imported"),
        ("tests.fixtures.zone_training:nope", "has no callable named 'nope'"),
    ],
)
def test_unknown_trainer(tmp_path, data, trainer: str, message: str) -> None:
    assert_rejected(config(tmp_path, data, trainer=trainer), ConfigError, message)


def test_only_failed_manifest_of_another_application(tmp_path, data) -> None:
    manifest = str(tmp_path / "other.parquet")
    row = {"zone": "z00000", "status": "failed", "rows": 1, "duration_s": 0.0, "metrics": "{}", "attempt": 1}
    pq.write_table(build_table("someone-else", [row]), manifest)
    assert_rejected(config(tmp_path, data), ConfigError, "belongs to application ['someone-else']", manifest)
    assert_rejected(config(tmp_path, data), ConfigError, "cannot be read", str(tmp_path / "missing.parquet"))


def test_cli_reports_malformed_config_on_one_line_with_exit_2(tmp_path, data, capsys) -> None:
    assert main(["--config-json", "{not json"]) == 2
    assert "zone_training: error: config --config-json is not valid JSON" in capsys.readouterr().err
    assert main(["--config-json", json.dumps({"application": "a"})]) == 2
    assert "config key 'data_uri' is required" in capsys.readouterr().err
    missing = config(tmp_path, data, zone_column="region")
    assert main(["--config-json", json.dumps(missing)]) == 2
    assert "zone_column 'region' is not a column" in capsys.readouterr().err


def test_plan_reads_partitioned_zones_directly_and_stages_files(tmp_path) -> None:
    parts = make_zone_dataset(str(tmp_path / "parts"), 6, (5, 9), features=2, seed=2, partitioned=True)
    single = make_zone_dataset(str(tmp_path / "one.parquet"), 6, (5, 9), features=2, seed=2)
    plan_p = inspect_dataset(parse_config(config(tmp_path, parts)), numeric_features=True)
    plan_s = inspect_dataset(parse_config(config(tmp_path, single)), numeric_features=True)
    assert plan_p.partitioned_by_zone and sorted(plan_p.zone_files) == sorted(plan_p.zone_rows)
    assert not plan_s.partitioned_by_zone and len(plan_s.chunks) == 1
    assert plan_p.zone_rows == plan_s.zone_rows and len(plan_s.zone_rows) == 6
    assert plan_s.feature_columns == ["f0", "f1"] and plan_p.file_columns == ["y", "f0", "f1"]


def test_only_failed_with_nothing_failed_rewrites_the_artifact_without_ray(tmp_path, data) -> None:
    import ray

    manifest = str(tmp_path / "prev.parquet")
    row = {"zone": "z00000", "status": "succeeded", "rows": 20, "duration_s": 0.1, "metrics": "{}"}
    gone = {"zone": "z-gone", "status": "failed", "rows": 3, "duration_s": 0.1, "metrics": "{}", "attempt": 1}
    pq.write_table(build_table("app", [{**row, "attempt": 1, "artifact": "m.joblib"}, gone]), manifest)
    summary = run_zone_training(parse_config(config(tmp_path, data)), only_failed=manifest)
    assert not ray.is_initialized()
    assert (summary["zones_total"], summary["succeeded"], summary["failed_zones"]) == (2, 1, ["z-gone"])
    rows = {r["zone"]: r for r in pq.read_table(summary["manifest"]).to_pylist()}
    assert rows["z-gone"]["attempt"] == 2 and "is no longer in" in rows["z-gone"]["error"]
    assert rows["z00000"]["artifact"] == "m.joblib"


def test_nulls_in_the_zone_partition_key(tmp_path) -> None:
    root = tmp_path / "parts"
    for value, rows in (("__HIVE_DEFAULT_PARTITION__", 2), ("a", 1)):
        (root / f"zone={value}").mkdir(parents=True)
        pq.write_table(
            pa.table({"y": [1.0] * rows, "f0": [2.0] * rows}), root / f"zone={value}" / "p.parquet"
        )
    assert_rejected(config(tmp_path, str(root)), DataError, "2 of 3 rows have a null zone in column 'zone'")


def test_empty_partitioned_dataset(tmp_path) -> None:
    root = tmp_path / "parts"
    (root / "zone=a").mkdir(parents=True)
    schema = pa.schema([("y", pa.float64()), ("f0", pa.float64())])
    pq.write_table(schema.empty_table(), root / "zone=a" / "p.parquet")
    assert_rejected(config(tmp_path, str(root)), DataError, "is empty (0 rows)")


def test_non_numeric_features_with_a_custom_array_trainer(tmp_path) -> None:
    path = str(tmp_path / "text.parquet")
    pq.write_table(pa.table({"zone": ["a"], "y": [1.0], "city": ["x"]}), path)
    raw = config(tmp_path, path, trainer="tests.fixtures.zone_training:zone_array_trainer")
    assert_rejected(raw, DataError, "feature columns ['city'] are not numeric; the trainer")


def test_zone_counts_match_the_data_for_string_and_integer_zones(tmp_path) -> None:
    path = str(tmp_path / "ints.parquet")
    pq.write_table(pa.table({"zone": [3, 1, 3, 3, 2], "y": [1.0] * 5, "f0": [2.0] * 5}), path)
    assert inspect_dataset(parse_config(config(tmp_path, path)), numeric_features=True).zone_rows == {
        "1": 1,
        "2": 1,
        "3": 3,
    }
    many = str(tmp_path / "strings.parquet")
    zones = pa.array([f"z{i % 7}" for i in range(1000)])
    pq.write_table(pa.table({"zone": zones, "y": [1.0] * 1000, "f0": [0.0] * 1000}), many, row_group_size=300)
    counts = inspect_dataset(parse_config(config(tmp_path, many)), numeric_features=True).zone_rows
    assert counts == {f"z{i}": len(range(i, 1000, 7)) for i in range(7)}


def test_validating_a_builtin_trainer_imports_no_scikit_learn(tmp_path, data) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_ray_provider.workloads.zone_training.config import parse_config\n"
        "from airflow_ray_provider.workloads.zone_training.dataset import inspect_dataset\n"
        "from airflow_ray_provider.workloads.zone_training.trainers import check_trainer\n"
        f"cfg = parse_config({config(tmp_path, data)!r})\n"
        "plan = inspect_dataset(cfg, numeric_features=check_trainer(cfg.trainer))\n"
        "assert len(plan.zone_rows) == 5, plan.zone_rows\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'ray')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_an_output_uri_that_cannot_be_written_is_probed_before_any_zone(tmp_path, data, capsys) -> None:
    """It used to train every zone and fail on save, with exit 3 and no field name."""
    assert_rejected(config(tmp_path, data, output_uri="/proc/x"), ArtifactError, "output_uri: '/proc/x'")
    assert main(["--config-json", json.dumps(config(tmp_path, data, output_uri="/proc/x"))]) == 2
    assert "zone_training: error: output_uri: '/proc/x' is not writable" in capsys.readouterr().err


def test_a_zone_no_machine_can_hold_fails_before_ray_starts(tmp_path, data, monkeypatch) -> None:
    """It used to wait for ever ("0/5 done, 1 in flight"): a private local Ray has this machine's CPUs."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    raw = config(tmp_path, data, num_cpus=local_cpus() + 1)
    del raw["ray_address"]  # standalone: the check runs before the private Ray would start
    assert_rejected(raw, ConfigError, f"num_cpus: each zone asks for {local_cpus() + 1:g} CPUs")


class FakeCluster:
    """The largest node's CPUs over time, and a clock that jumps by each sleep (no waiting for real)."""

    def __init__(self, cpus: list[float]) -> None:
        self.cpus, self.now, self.slept = cpus, 0.0, 0.0

    def largest(self) -> float:
        return self.cpus[min(int(self.now // 2), len(self.cpus) - 1)]

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_an_autoscaling_cluster_is_given_capacity_wait_s_then_refused(caplog) -> None:
    never = FakeCluster([2.0])
    with pytest.raises(ConfigError, match=r"num_cpus: .* 64 CPUs.*within capacity_wait_s=10s"):
        wait_for_capacity(
            64, 10, largest=never.largest, scales=lambda: True, clock=lambda: never.now, sleep=never.sleep
        )
    assert never.slept == pytest.approx(10)
    assert "waiting up to 10s (capacity_wait_s) for the autoscaler to add a node with 64 CPUs" in caplog.text
    grows = FakeCluster([2.0, 2.0, 64.0])
    wait_for_capacity(
        64, 60, largest=grows.largest, scales=lambda: True, clock=lambda: grows.now, sleep=grows.sleep
    )
    assert grows.slept == pytest.approx(4)
    fixed = FakeCluster([2.0])
    with pytest.raises(ConfigError, match="at most 2 CPUs on one node") as err:
        wait_for_capacity(
            64, 60, largest=fixed.largest, scales=lambda: False, clock=lambda: 0.0, sleep=fixed.sleep
        )
    assert fixed.slept == 0 and "capacity_wait_s" not in str(err.value)


def test_capacity_wait_s_is_validated(tmp_path, data) -> None:
    with pytest.raises(ConfigError, match="capacity_wait_s"):
        parse_config(config(tmp_path, data, capacity_wait_s=-1))
    assert parse_config(config(tmp_path, data)).capacity_wait_s == 300


def test_manifest_rows_come_from_one_constructor() -> None:
    row = manifest_row("z1", "failed", error="boom", rows=3, attempt=2)
    assert set(row) == {*COLUMNS, *EXTRA_COLUMNS} - {"application"}
    assert (row["metrics"], row["artifact"], row["duration_s"]) == ("{}", None, 0.0)
    with pytest.raises(ValueError, match="needs its error"):
        manifest_row("z1", "failed", rows=3, attempt=1)
    with pytest.raises(ValueError, match="one of"):
        manifest_row("z1", "done", rows=3, attempt=1)


def test_an_autoscaler_is_told_from_the_read_only_monitor_every_head_runs() -> None:
    readonly = {"autoscaler_report": {"active_nodes": {"node_3f2a": 1}, "pending_launches": {}}}
    kuberay = {
        "autoscaler_report": {"active_nodes": {"headgroup": 1}, "pending_launches": {"cpu-workers": 1}}
    }
    assert not scales_from_status(readonly) and not scales_from_status({})
    assert scales_from_status(kuberay)


def test_a_single_file_is_planned_as_pyarrow_dataset_plans_it_without_importing_pandas(tmp_path) -> None:
    """The one-file shortcut (no pyarrow.dataset, which imports pandas) makes the same plan as the dataset."""
    import pyarrow.dataset as pads

    from airflow_ray_provider.workloads.zone_training import dataset as zone_dataset

    path = str(tmp_path / "one.parquet")
    table = pq.read_table(make_zone_dataset(path, 7, (5, 9), features=2, seed=3))
    pq.write_table(table, path, row_group_size=9)  # several row groups, so several chunks
    cfg = parse_config(config(tmp_path, path))
    fast = zone_dataset.inspect_dataset(cfg, numeric_features=True)
    fs, resolved = zone_dataset.artifacts.resolve(path)
    dataset = zone_dataset._open(path, fs, resolved, "zone")
    fragments = list(dataset.get_fragments())
    assert pads.get_partition_keys(fragments[0].partition_expression) == {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zone_dataset, "CHUNK_ROWS", 20)
        small = zone_dataset.inspect_dataset(cfg, numeric_features=True)
        assert small.chunks == zone_dataset._chunks(fragments, set()) and len(small.chunks) > 1
    assert fast.zone_rows == zone_dataset._zone_counts(dataset, cfg)
    assert fast.chunks == zone_dataset._chunks(fragments, set())
    assert (fast.feature_columns, fast.file_columns) == (["f0", "f1"], ["zone", "y", "f0", "f1"])
    code = (
        "import sys\n"
        "from airflow_ray_provider.workloads.zone_training.config import parse_config\n"
        "from airflow_ray_provider.workloads.zone_training.dataset import inspect_dataset\n"
        f"cfg = parse_config({config(tmp_path, path)!r})\n"
        "inspect_dataset(cfg, numeric_features=True)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas')[:3])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_file_in_a_hive_folder_keeps_its_partition_column(tmp_path) -> None:
    folder = tmp_path / "zone=a"
    folder.mkdir()
    pq.write_table(pa.table({"y": [1.0, 2.0], "f0": [2.0, 3.0]}), folder / "p.parquet")
    plan = inspect_dataset(parse_config(config(tmp_path, str(folder / "p.parquet"))), numeric_features=True)
    assert plan.zone_rows == {"a": 2} and plan.partitioned_by_zone


def test_a_file_that_is_not_parquet_is_refused_as_before(tmp_path) -> None:
    path = tmp_path / "bad.parquet"
    path.write_text("not parquet")
    assert_rejected(config(tmp_path, str(path)), DataError, "is not a readable Parquet dataset")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": -1}, "trainer_kwargs (trainer 'ridge'): The 'alpha' parameter of Ridge must be a float"),
        ({"alpah": 1.0}, "trainer_kwargs: ['alpah'] not parameters of Ridge (trainer 'ridge'); use"),
        ({"validation_fraction": 1.0}, "trainer_kwargs.validation_fraction must be a number in [0, 1)"),
        ({"validation_fraction": "0.2"}, "trainer_kwargs.validation_fraction must be a number in [0, 1)"),
    ],
)
def test_a_builtin_trainers_keywords_are_checked_before_any_zone(tmp_path, data, kwargs, message) -> None:
    """``alpha: -1`` used to start the run and fail every zone (exit 1, "300 of 300 zones failed")."""
    assert_rejected(config(tmp_path, data, trainer="ridge", trainer_kwargs=kwargs), ConfigError, message)
    assert not (tmp_path / "out").exists()  # no manifest, no models: nothing was trained


def test_a_builtin_trainers_keywords_are_checked_with_its_estimators_own_rules() -> None:
    from airflow_ray_provider.workloads.zone_training.trainers import check_builtin_kwargs

    check_builtin_kwargs("ridge", {"alpha": 3.0, "validation_fraction": 0})  # accepted: no error
    check_builtin_kwargs("hist_gradient_boosting", {"max_iter": 50, "loss": "poisson"})
    check_builtin_kwargs("logistic_regression", {"penalty": "l1"})  # with lbfgs: only fit() refuses it
    with pytest.raises(ConfigError, match="'max_iter' parameter of HistGradientBoostingClassifier"):
        check_builtin_kwargs("hist_gradient_boosting_classifier", {"max_iter": 0})
    with pytest.raises(ConfigError, match="'C' parameter of LogisticRegression"):
        check_builtin_kwargs("logistic_regression", {"C": "strong"})


def test_the_cli_names_a_bad_trainer_keyword_on_one_line_with_exit_2(tmp_path, data, capsys) -> None:
    raw = config(tmp_path, data, trainer="ridge", trainer_kwargs={"alpha": -1})
    assert main(["--config-json", json.dumps(raw)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zone_training: error: trainer_kwargs (trainer 'ridge'): The 'alpha' parameter")
    assert len(err.strip().splitlines()) == 1


def test_a_ray_address_nothing_answers_at_fails_before_any_output_changes(
    tmp_path, data, unreachable_ray_address, capsys
) -> None:
    """It used to hang in ``ray.init`` (retrying the GCS without end, deaf to SIGTERM) after validation."""
    raw = config(tmp_path, data, ray_address=unreachable_ray_address)
    assert main(["--config-json", json.dumps(raw)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zone_training: error: ray_address {unreachable_ray_address!r}: nothing accepts")
    assert not (tmp_path / "out").exists()


def test_ray_address_auto_without_a_cluster_fails_naming_the_field(
    tmp_path, data, monkeypatch, capsys
) -> None:
    """It used to end in a 37-line ``ConnectionError`` traceback, exit 1 (the code of a bug)."""
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray-here"))  # where `auto` looks: nothing there
    assert not ray.is_initialized()
    assert main(["--config-json", json.dumps(config(tmp_path, data, ray_address="auto"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zone_training: error: ray_address 'auto': Ray found no cluster there")
    assert "leave ray_address out" in err and len(err.strip().splitlines()) == 1
    assert not ray.is_initialized()


def test_a_driver_without_scikit_learn_leaves_the_keywords_to_the_workers(monkeypatch) -> None:
    """The check must not fail a job whose driver lacks the library only its workers need."""
    from airflow_ray_provider.workloads.zone_training.trainers import check_builtin_kwargs

    monkeypatch.setitem(sys.modules, "sklearn.linear_model", None)  # importing it raises ImportError
    check_builtin_kwargs("ridge", {"alpha": -1})  # not checked here: no error
    with pytest.raises(ConfigError, match="validation_fraction"):  # what needs no library still is
        check_builtin_kwargs("ridge", {"validation_fraction": 2})

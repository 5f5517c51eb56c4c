"""The evaluation end to end on the Ray engine, on a real local Ray (one per module, 2 CPUs, own temp)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import DataError
from airflow_ray_provider.workloads.common.ray_session import quiet_private_ray
from airflow_ray_provider.workloads.evaluation.phases import PHASES
from airflow_ray_provider.workloads.evaluation.run import run_evaluation
from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset

pytestmark = pytest.mark.integration
SMALL_BLOCKS = {"concurrency": 2, "num_cpus": 0.25, "read_num_cpus": 0.5, "block_rows": 2000}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A private local Ray instance for this module (never joins another process's cluster), with the
    workloads' environment for one (a token of its own: Ray writes none into ``~/.ray``)."""
    import ray

    temp = tempfile.mkdtemp(prefix="arpev", dir="/tmp")
    try:
        with quiet_private_ray():
            ray.init(
                address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False
            )
            yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def test_artifact_matches_sklearn_on_the_predictions(
    local_ray: None, eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str]
) -> None:
    cfg = eval_config(
        write_predictions=True, scoring=SMALL_BLOCKS, run_info={"dag_id": "d", "run_id": "r"}, engine="ray"
    )
    os.makedirs(cfg["output_uri"])
    open(os.path.join(cfg["output_uri"], "_SUCCESS"), "w").close()  # stale marker from an older run
    doc = run_evaluation(cfg)
    out = cfg["output_uri"]
    assert artifacts.is_complete(out)
    assert not [n for n in os.listdir(out) if n.startswith("_staging")]
    with open(os.path.join(out, "metrics.json")) as fh:
        on_disk = json.load(fh)
    assert on_disk == json.loads(json.dumps(doc))
    assert on_disk["schema_version"] == 1 and on_disk["kind"] == "evaluation"
    assert on_disk["data"]["rows"] == 20_000 and on_disk["run"]["run_info"] == {"dag_id": "d", "run_id": "r"}
    assert on_disk["models"]["champion"]["sha256"] and on_disk["models"]["champion"]["loader"] == "pickle"
    assert on_disk["run"]["engine"]["name"] == "ray" and on_disk["run"]["ray_session"] == "existing"
    timings = on_disk["run"]["timings"]
    assert set(PHASES) <= set(timings)
    for phase in ("preflight_s", "ray_init_s", "actor_startup_s", "first_row_s", "scoring_s", "finalize_s"):
        assert timings[phase] is not None and timings[phase] >= 0, (phase, timings)
    assert timings["first_row_s"] <= timings["total_s"]
    preds = pq.read_table(os.path.join(out, "predictions")).to_pandas()
    assert len(preds) == 20_000
    y = preds["clicked"].to_numpy()
    for model in ("champion", "challenger"):
        p = preds[f"score_{model}"].to_numpy()
        got = on_disk["metrics"][model]
        assert got["roc_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-9, rel=0)
        assert got["log_loss"] == pytest.approx(log_loss(y, p), abs=1e-9, rel=0)
        assert got["accuracy"] == pytest.approx(accuracy_score(y, p >= 0.5), abs=1e-9, rel=0)
    delta = on_disk["deltas"]["challenger"]["roc_auc"]
    assert delta["ci_low"] <= delta["delta"] <= delta["ci_high"]
    assert on_disk["bootstrap"]["unit"] == "group"
    slices = pq.read_table(os.path.join(out, "slices.parquet")).to_pylist()
    assert len(slices) == 8 * 2 and sum(r["rows"] for r in slices if r["model"] == "champion") == 20_000
    assert {r["slice"] for r in slices} == {f"zone=z{i:03d}" for i in range(8)}


def test_partitioned_layout_and_block_size_give_identical_metrics(
    local_ray: None, eval_config: Callable[..., dict[str, Any]], tmp_path: Any
) -> None:
    flat = make_eval_dataset(
        str(tmp_path / "flat"), 6000, zones=4, features=6, group_size=10, seed=9, rows_per_file=3000
    )
    part = make_eval_dataset(
        str(tmp_path / "part"),
        6000,
        zones=4,
        features=6,
        group_size=10,
        seed=9,
        rows_per_file=3000,
        partitioned=True,
        row_group_size=700,
    )
    assert any(name.startswith("zone=") for name in os.listdir(part))
    a = run_evaluation(eval_config(data_uri=flat, output_uri=str(tmp_path / "a"), engine="ray"))
    b = run_evaluation(
        eval_config(data_uri=part, output_uri=str(tmp_path / "b"), scoring=SMALL_BLOCKS, engine="ray")
    )
    assert a["metrics"] == b["metrics"]
    assert a["slices"] == b["slices"]
    assert a["deltas"] == b["deltas"]
    assert a["data"]["groups"] == b["data"]["groups"] > 0


@pytest.mark.parametrize("engine", ["ray", "local"])
def test_bad_labels_deep_in_the_data_fail_without_an_artifact(
    local_ray: None, eval_config: Callable[..., dict[str, Any]], tmp_path: Any, engine: str
) -> None:
    data = make_eval_dataset(
        str(tmp_path / "d"), 4000, zones=2, features=6, group_size=10, seed=2, rows_per_file=2000
    )
    last = os.path.join(data, "part-00001.parquet")
    table = pq.read_table(last)
    labels = table.column("clicked").to_numpy().copy()
    labels[-1] = 2
    # Without footer statistics: the preflight cannot see the bad label (it reads footers and a sample),
    # so it is found while scoring (with statistics it fails before Ray: test_whole_input.py).
    relabelled = table.set_column(table.column_names.index("clicked"), "clicked", [labels])
    pq.write_table(relabelled, last, write_statistics=False)
    cfg = eval_config(data_uri=data, write_predictions=True, scoring=SMALL_BLOCKS, engine=engine)
    with pytest.raises(DataError) as info:
        run_evaluation(cfg)
    # Raised in a scoring actor (or in this process), it reaches the caller as itself.
    assert type(info.value) is DataError
    assert str(info.value).startswith("label column 'clicked' must hold 0/1 for binary metrics")
    leftovers = os.listdir(cfg["output_uri"]) if os.path.exists(cfg["output_uri"]) else []
    assert leftovers == [], leftovers
    assert np.isin(labels[:-1], (0, 1)).all()


def test_ray_and_in_process_engines_give_bit_identical_metrics(
    local_ray: None, eval_config: Callable[..., dict[str, Any]], tmp_path: Any
) -> None:
    on_ray = run_evaluation(
        eval_config(
            output_uri=str(tmp_path / "ray"), scoring=SMALL_BLOCKS, engine="ray", write_predictions=True
        )
    )
    local = run_evaluation(
        eval_config(output_uri=str(tmp_path / "local"), engine="local", write_predictions=True)
    )
    assert on_ray["run"]["engine"]["name"] == "ray" and local["run"]["engine"]["name"] == "local"
    assert local["run"]["timings"]["actor_startup_s"] is not None and local["run"]["timings"]["scoring_s"]
    for key in ("data", "metrics", "slices", "deltas", "models"):
        assert on_ray[key] == local[key], key  # ==, not approx: the same exact integer partials
    ray_preds = pq.read_table(str(tmp_path / "ray" / "predictions")).sort_by("request_id")
    local_preds = pq.read_table(str(tmp_path / "local" / "predictions")).sort_by("request_id")
    assert ray_preds.num_rows == local_preds.num_rows == 20_000
    for model in ("champion", "challenger"):
        assert np.array_equal(
            np.sort(ray_preds.column(f"score_{model}").to_numpy()),
            np.sort(local_preds.column(f"score_{model}").to_numpy()),
        )


def test_ray_driver_spilling_every_auc_score_gives_the_in_memory_bits(
    local_ray: None, eval_config: Callable[..., dict[str, Any]], tmp_path: Any
) -> None:
    """``auc_memory_mb: 0``: the Ray driver spills from the first block on; finalize reads them back."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    spilled = run_evaluation(
        eval_config(
            output_uri=str(tmp_path / "spilled"),
            scoring=SMALL_BLOCKS,
            engine="ray",
            auc_memory_mb=0,
            spill_dir=str(spill_dir),
        )
    )
    held = run_evaluation(eval_config(output_uri=str(tmp_path / "held"), engine="local"))
    for key in ("data", "metrics", "slices", "deltas"):
        assert spilled[key] == held[key], key
    assert os.listdir(spill_dir) == []

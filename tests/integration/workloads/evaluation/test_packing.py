"""Packed models on the session's Ray head: the same metrics as scoring each challenger alone, one read.

The head (4 CPUs, no GPU) is the session's ``ray_head``, joined through the ``zone_ray`` fixture; the CPU
and GPU pools share a head of their own with one (fake) GPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.evaluation.run import run_evaluation

pytestmark = pytest.mark.integration


def _models(sample: dict[str, str], **declared: dict[str, Any]) -> dict[str, Any]:
    champion, challenger = sample["champion_uri"], sample["challenger_uri"]
    return {
        "champion": {"uri": champion},
        "c1": {"uri": challenger, **declared.get("c1", {})},
        "c2": {"factory": "tests.fixtures.evaluation:make_rounded_model", "kwargs": {"weights": [0.3] * 6}}
        | declared.get("c2", {}),
    }


def _by_model(doc: dict[str, Any], model: str) -> dict[str, Any]:
    return {
        "metrics": doc["metrics"][model],
        "slices": [row for row in doc["slices"]["rows"] if row["model"] == model],
        "deltas": doc["deltas"].get(model),
    }


def test_packed_groups_score_like_one_challenger_at_a_time(
    zone_ray: Any, eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str], tmp_path: Any
) -> None:
    models = _models(eval_sample, c1={"num_cpus": 1}, c2={"num_cpus": 1, "memory": 2**20})
    scoring = {"concurrency": 1, "num_cpus": 0.25, "read_num_cpus": 0.25, "models_per_actor": 2}
    packed = run_evaluation(
        eval_config(models=models, scoring=scoring, engine="ray", output_uri=str(tmp_path / "packed"))
    )
    groups = [(g["models"], g["num_cpus"]) for g in packed["run"]["packing"]]
    assert groups == [(["champion"], 0.0), (["c1", "c2"], 2.0)]  # largest first, then capped at two
    io = packed["run"]["io"]
    assert io["passes"] == 1.0 and io["bytes_read"] == io["pass_bytes"] > 0  # each block read once
    assert 0 < io["read_fraction"] <= 1.0
    local = run_evaluation(
        eval_config(models=models, scoring=scoring, engine="local", output_uri=str(tmp_path / "local"))
    )
    assert local["run"]["packing"] == packed["run"]["packing"] and local["run"]["io"] == io
    for key in ("metrics", "slices", "deltas"):
        assert local[key] == packed[key], key
    for challenger in ("c1", "c2"):
        alone = run_evaluation(
            eval_config(
                models={m: models[m] for m in ("champion", challenger)},
                engine="ray",
                output_uri=str(tmp_path / challenger),
            )
        )
        assert len(alone["run"]["packing"]) == 1
        for model in ("champion", challenger):
            assert _by_model(alone, model) == _by_model(packed, model), model  # ==: exact partials


def test_a_gpu_model_on_a_cpu_only_cluster_fails_before_scoring(
    zone_ray: Any, eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str], tmp_path: Any
) -> None:
    """CPU and GPU declarations mixed; the cluster has no GPU: a ConfigError naming the model and field."""
    models = _models(eval_sample, c1={"num_cpus": 1}, c2={"num_gpus": 1})
    out = str(tmp_path / "artifact")
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        run_evaluation(eval_config(models=models, engine="ray", output_uri=out))
    message = str(info.value)
    assert "model 'c2'" in message and "models.c2.num_gpus=1" in message and "0 GPUs" in message
    assert not os.path.exists(out)
    assert time.monotonic() - started < 30


@pytest.fixture()
def fake_gpu_ray(monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process connected to a head of its own with 2 CPUs and 1 GPU (Ray counts what it is told)."""
    import ray

    from airflow_ray_provider.local import LocalHeadConfig, read_token, start_head, stop_head
    from tests.fixtures.zone_training import _zone_reset_ray_auth

    info = start_head(LocalHeadConfig(num_cpus=2, num_gpus=1, auth=True), name="packing-gpu")
    try:
        assert info.token_file is not None
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        monkeypatch.setenv("RAY_AUTH_TOKEN", read_token(info.token_file))
        _zone_reset_ray_auth()
        ray.shutdown()  # an earlier test of this process may have left its connection (seen under xdist)
        ray.init(address=info.gcs_address, logging_level="WARNING", log_to_driver=False)
        yield info
    finally:
        ray.shutdown()
        stop_head(info)
        monkeypatch.undo()
        _zone_reset_ray_auth()


def test_cpu_and_gpu_models_score_in_their_own_pools_in_one_run(
    fake_gpu_ray: Any, eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str], tmp_path: Any
) -> None:
    """A GPU model's group is its own pool, holding the cluster's GPU; metrics equal the in-process run's."""
    models = _models(eval_sample, c1={"num_cpus": 1}, c2={"num_gpus": 1})
    scoring = {"concurrency": 1, "num_cpus": 0.25, "read_num_cpus": 0.25}
    packed = run_evaluation(
        eval_config(models=models, scoring=scoring, engine="ray", output_uri=str(tmp_path / "packed"))
    )
    groups = {tuple(g["models"]): g["num_gpus"] for g in packed["run"]["packing"]}
    assert groups[("c2",)] == 1.0 and all(gpus == 0 for key, gpus in groups.items() if key != ("c2",))
    assert packed["run"]["io"]["passes"] == 1.0  # the GPU pool got the same blocks, read once
    local = run_evaluation(
        eval_config(models=models, scoring=scoring, engine="local", output_uri=str(tmp_path / "local"))
    )
    for key in ("metrics", "slices", "deltas"):
        assert local[key] == packed[key], key

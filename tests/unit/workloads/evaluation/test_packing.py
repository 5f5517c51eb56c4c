"""Model packing: first-fit-decreasing groups that fit one node, declared resources validated, exact merge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from airflow_ray_provider.workloads.common.cli import load_config
from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.evaluation.config import EvalConfig
from airflow_ray_provider.workloads.evaluation.packing import Resources, actor_counts, pack_models

pytestmark = pytest.mark.unit
GIB = 2**30


def _groups(demands: dict[str, Resources], nodes: list[Resources], **kw: Any) -> list[tuple[str, ...]]:
    return [g.models for g in pack_models(demands, nodes, **kw)]


def test_first_fit_decreasing_fills_groups_up_to_one_node() -> None:
    demands = {"a": Resources(1), "b": Resources(3), "c": Resources(2), "d": Resources(2)}
    # largest first: b(3) -> g1; c(2) -> g2; d(2) -> g2 (4); a(1) -> g1 (4); config order inside a group
    assert _groups(demands, [Resources(4, 0, 64 * GIB)]) == [("a", "b"), ("c", "d")]
    by_memory = {"x": Resources(0, 0, 3 * GIB), "y": Resources(0, 0, 3 * GIB)}
    assert _groups(by_memory, [Resources(8, 0, 4 * GIB)]) == [("x",), ("y",)]


def test_undeclared_models_share_one_group_unless_capped() -> None:
    demands = {f"m{i}": Resources() for i in range(5)}
    node = [Resources(2, 0, GIB)]
    assert _groups(demands, node) == [("m0", "m1", "m2", "m3", "m4")]
    assert _groups(demands, node, max_models=2) == [("m0", "m1"), ("m2", "m3"), ("m4",)]


def test_gpu_models_never_share_a_group_with_cpu_only_models() -> None:
    demands = {"cpu": Resources(1), "gpu_a": Resources(1, 0.5), "gpu_b": Resources(1, 0.5)}
    groups = pack_models(demands, [Resources(16, 1, 64 * GIB)])
    assert [(g.models, g.gpu) for g in groups] == [(("cpu",), False), (("gpu_a", "gpu_b"), True)]
    assert groups[1].needs == Resources(2, 1.0, 0)


def test_a_model_no_node_can_hold_is_named_with_its_field() -> None:
    cpu_only = [Resources(4, 0, 16 * GIB), Resources(4, 0, 16 * GIB)]
    with pytest.raises(ConfigError) as info:
        pack_models({"small": Resources(1), "big": Resources(1, 1)}, cpu_only)
    message = str(info.value)
    assert "model 'big'" in message and "models.big.num_gpus=1" in message and "GPU" in message
    # each field fits some node, but no single node has both: every exceeded field is named
    mixed = [Resources(8, 0, 16 * GIB), Resources(2, 1, 16 * GIB)]
    with pytest.raises(ConfigError, match=r"models\.m\.num_cpus=8, models\.m\.num_gpus=1"):
        pack_models({"m": Resources(8, 1)}, mixed)


def test_pools_shrink_largest_first_until_they_fit_with_a_read_task() -> None:
    per_actor = [Resources(1), Resources(0.5)]
    assert actor_counts([2, 2], per_actor, Resources(3.0, 0, 0)) == [2, 2]
    assert actor_counts([2, 2], per_actor, Resources(1.5, 0, 0)) == [1, 1]
    assert actor_counts([3, 3], per_actor, Resources(2.5, 0, 0)) == [1, 2]


def test_pools_that_cannot_all_run_at_once_are_refused_unless_the_cluster_can_grow() -> None:
    from airflow_ray_provider.workloads.evaluation.pipeline import pool_sizes

    cfg = EvalConfig.from_dict(
        {**_raw(), "scoring": {"concurrency": 2, "num_cpus": 0.5, "read_num_cpus": 0.5}}
    )
    groups = pack_models(
        {"champion": Resources(), "big": Resources(1.5)}, [Resources(2, 0, GIB)], max_models=1
    )
    assert pool_sizes(cfg, groups[:1], [Resources(2, 0, GIB)], blocks=8) == [2]
    with pytest.raises(ConfigError, match=r"2 model group\(s\) need 2 CPUs.*models_per_actor"):
        pool_sizes(cfg, groups, [Resources(2, 0, GIB)], blocks=8)
    assert pool_sizes(cfg, groups, [Resources(2, 0, GIB)], blocks=8, can_grow=True) == [1, 1]
    # an autoscaling cluster: a model no node holds yet gets a group of its own, no error
    grown = pack_models({"a": Resources(), "gpu": Resources(1, 1)}, [Resources(2, 0, GIB)], can_grow=True)
    assert [g.models for g in grown] == [("a",), ("gpu",)]


def _raw(**model: Any) -> dict[str, Any]:
    return {
        "data_uri": "/d",
        "columns": {"label": "y", "group": "q"},
        "models": {"champion": "/m/a.joblib", "big": {"uri": "/m/b.joblib", **model}},
        "output_uri": "/o",
    }


def test_declared_resources_are_parsed_and_validated_per_model() -> None:
    cfg = EvalConfig.from_dict(_raw(num_cpus=2, num_gpus=0.5, memory=GIB))
    assert cfg.models[1].resources == Resources(2.0, 0.5, float(GIB))
    assert cfg.models[0].resources == Resources()
    for bad, key in (({"num_cpus": -1}, "num_cpus"), ({"num_gpus": "one"}, "num_gpus")):
        with pytest.raises(ConfigError, match=rf"models\.big\.{key}"):
            EvalConfig.from_dict(_raw(**bad))
    with pytest.raises(ConfigError, match=r"models\.big\.memory must be a finite number"):
        EvalConfig.from_dict(_raw(memory=float("inf")))
    with pytest.raises(ConfigError, match="models_per_actor"):
        EvalConfig.from_dict({**_raw(), "scoring": {"models_per_actor": -2}})


def test_a_model_name_given_twice_in_a_config_file_is_refused() -> None:
    text = '{"models": {"champion": "/m/a.joblib", "c1": "/m/b.joblib", "c1": "/m/c.joblib"}}'
    with pytest.raises(ConfigError, match="the key 'c1' twice"):
        load_config(inline_json=text)


def test_merged_group_partials_equal_the_one_group_partial(
    eval_config: Callable[..., dict[str, Any]], eval_sample: dict[str, str]
) -> None:
    """Without a group column too (row bootstrap units hashed from the data, not from the scores)."""
    from airflow_ray_provider.workloads.evaluation.block import BlockEvaluator, merge_partials
    from airflow_ray_provider.workloads.evaluation.preflight import run_preflight
    from airflow_ray_provider.workloads.evaluation.source import read_unit

    champion = {"uri": eval_sample["champion_uri"]}
    models = {"champion": champion, "a": {"uri": eval_sample["challenger_uri"]}, "b": champion}
    features = [f"f{i}" for i in range(6)]
    no_groups = {"columns": {"label": "clicked", "features": features}, "metrics": ["roc_auc", "log_loss"]}
    for options in ({}, no_groups):
        cfg = EvalConfig.from_dict(eval_config(models=models, **options))
        pre = run_preflight(cfg)
        table = read_unit(pre.units[1], cfg.data_uri, pre.read_columns)
        whole = BlockEvaluator(cfg, pre.features, pre.has_proba, None, models=pre.loaded).evaluate(table)
        parts = [
            BlockEvaluator(cfg, pre.features, pre.has_proba, None, models=pre.loaded, names=names).evaluate(
                table
            )
            for names in (("b",), ("champion", "a"))
        ]
        _assert_same(merge_partials(parts), whole)


def _assert_same(got: Any, want: Any) -> None:
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        for key in want:
            _assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _assert_same(a, b)
    elif isinstance(want, np.ndarray):
        assert np.array_equal(got, want)
    else:
        assert got == want

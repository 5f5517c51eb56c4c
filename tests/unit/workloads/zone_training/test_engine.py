"""Which engine trains the zones (``engine: auto | ray | local``): the rule as a table, and bad values."""

from __future__ import annotations

import logging

import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.zone_training.config import parse_config
from airflow_ray_provider.workloads.zone_training.engine import choose_engine, default_local_max_rows

pytestmark = pytest.mark.unit

BASE = {"application": "a", "data_uri": "/d", "zone_column": "z", "label_column": "y", "output_uri": "/o"}
LIMIT = 1_000_000


@pytest.mark.parametrize(
    ("requested", "standalone", "rows", "staged", "engine", "why"),
    [
        ("auto", True, 2_000_000 // 2, True, "local", "auto: standalone, worker processes"),
        ("auto", True, LIMIT, True, "local", "auto: standalone"),
        ("auto", True, LIMIT + 1, True, "ray", "auto: too many rows to stage on this machine"),
        ("auto", True, 50 * LIMIT, False, "local", "partitioned by zone: not staged"),
        ("auto", False, 10, True, "ray", "auto: inside a Ray job or connected to a cluster"),
        ("auto", False, 10, False, "ray", "auto: inside a Ray job"),
        ("ray", True, 10, True, "ray", "engine: ray in the config"),
        ("local", True, 50 * LIMIT, True, "local", "engine: local in the config"),
        ("local", False, 10, True, "local", "engine: local in the config"),
    ],
)
def test_engine_choice(
    requested: str, standalone: bool, rows: int, staged: bool, engine: str, why: str
) -> None:
    choice = choose_engine(requested, standalone=standalone, rows=rows, staged=staged, local_max_rows=LIMIT)
    assert choice.engine == engine and why in choice.reason
    assert f"{rows:,} rows" in choice.reason and choice.as_dict() == {"name": engine, "reason": choice.reason}


def test_forcing_local_inside_a_ray_job_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        choose_engine("local", standalone=False, rows=10, staged=True, local_max_rows=LIMIT)
    assert "engine: local with a Ray cluster available: only this machine trains" in caplog.text


def test_the_default_limit_is_a_quarter_of_memory_staged() -> None:
    # 11 float64 columns = 88 bytes a row; a quarter of 8.8 GB holds 25M rows
    assert default_local_max_rows(11, 8_800_000_000) == 25_000_000


def test_engine_and_limit_are_parsed() -> None:
    cfg = parse_config(dict(BASE))
    assert (cfg.engine, cfg.local_max_rows) == ("auto", None)
    cfg = parse_config({**BASE, "engine": "local", "local_max_rows": 5000})
    assert (cfg.engine, cfg.local_max_rows) == ("local", 5000)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"engine": "spark"}, "config key 'engine' must be one of ['auto', 'ray', 'local'], got 'spark'"),
        ({"engine": None}, "config key 'engine' must be one of"),
        ({"local_max_rows": -1}, "config key 'local_max_rows' must be an integer >= 0, got -1"),
        ({"local_max_rows": "1e6"}, "config key 'local_max_rows' must be an integer"),
    ],
)
def test_a_bad_engine_setting_names_the_key(change: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **change})
    assert message in str(info.value)

"""The shared config checks: each message names the key by its dotted path and says what it must be."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.common.validation import ConfigSection

pytestmark = pytest.mark.unit


def _error(call: Any) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    return str(info.value)


def test_values_and_defaults_are_read() -> None:
    top = ConfigSection.root(
        {"name": "a", "n": 3, "x": 0.5, "flag": True, "cols": "c", "opts": {"k": 1}, "sub": None},
        "the config",
    )
    assert top.required_str("name") == "a" and top.optional_str("missing") is None
    assert top.integer("n", 0) == 3 and top.integer("other", 7) == 7
    assert top.number("x", 1.0, low=0.0, high=1.0) == 0.5 and top.optional_number("t", low=0.0) is None
    assert (
        top.boolean("flag", False) is True and top.mapping("opts") == {"k": 1} and top.mapping("none") == {}
    )
    assert top.names("cols", single_ok=True) == ("c",) and top.names("absent") is None
    sub = top.section("sub")
    assert sub.path == "sub" and sub.key("k") == "sub.k" and sub.integer("k", 2) == 2


def test_messages_name_the_dotted_key_and_the_rule() -> None:
    top = ConfigSection.root({"batching": {"max_in_flight": 0, "rate": True, "typo": 1}, "s": ""}, "cfg")
    batching = top.section("batching")
    assert _error(lambda: batching.integer("max_in_flight", 1, low=1)) == (
        "config key 'batching.max_in_flight' must be an integer >= 1, got 0"
    )
    assert (
        _error(lambda: batching.number("rate", 1.0))
        == "config key 'batching.rate' must be a number, got True"
    )
    assert _error(lambda: batching.reject_unknown({"max_in_flight", "rate"})) == (
        "unknown 'batching' key(s) ['typo']; valid keys: ['max_in_flight', 'rate'] (typo?)"
    )
    assert _error(lambda: top.reject_unknown({"s"})) == (
        "unknown config key(s) ['batching']; valid keys: ['s'] (typo?)"
    )
    assert _error(lambda: top.required_str("s", hint="a path or URI")) == (
        "config key 's' must be a non-empty string (a path or URI), got ''"
    )
    assert _error(lambda: top.required_str("uri", hint="a path or URI")) == (
        "config key 'uri' is required (a path or URI)"
    )
    assert (
        _error(lambda: top.section("s", example="{a: 1}"))
        == "config key 's' must be a mapping like {a: 1}, got str"
    )
    assert _error(lambda: ConfigSection.root([1], "the zone-training config")) == (
        "the zone-training config must be a mapping (JSON object), got list"
    )


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (0, {"low": 0.0, "low_open": True}, "must be > 0.0, got 0"),
        (1.5, {"low": 0.0, "high": 1.0}, "must be >= 0.0 and <= 1.0, got 1.5"),
        (5, {"high": 4.0}, "must be <= 4.0, got 5"),
    ],
)
def test_number_bounds(value: float, kwargs: dict[str, Any], message: str) -> None:
    top = ConfigSection({"v": value})
    assert _error(lambda: top.number("v", 1.0, **kwargs)) == f"config key 'v' {message}"


def test_lists_of_names() -> None:
    top = ConfigSection({"empty": [], "mixed": ["a", 1], "one": "a"})
    assert top.names("empty") == ()
    assert _error(lambda: top.names("empty", non_empty=True)) == (
        "config key 'empty' must be a non-empty list of column names, got []"
    )
    assert _error(lambda: top.names("mixed", noun="metric names")) == (
        "config key 'mixed' must be a list of metric names, got ['a', 1]"
    )
    assert _error(lambda: top.names("one")) == "config key 'one' must be a list of column names, got 'a'"

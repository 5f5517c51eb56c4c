"""The pool's decisions, table-tested: what a run does with the pool's cluster, and when it is idle."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch.pool import (
    PoolOptions,
    PoolRecord,
    PoolStep,
    decide,
    fingerprint,
    idle_expired,
    live_holders,
)

pytestmark = pytest.mark.unit

SPEC = fingerprint({"head": {"image": "rayproject/ray:2.60.0", "cpu": 1}, "workers": [{"replicas": 2}]})
OTHER = fingerprint({"head": {"image": "rayproject/ray:2.59.0", "cpu": 1}, "workers": [{"replicas": 3}]})
LIVE, EXPIRED = {"run-a": 200.0}, {"run-a": 50.0}


@pytest.mark.parametrize(
    ("record", "spec", "leases", "replace", "step"),
    [
        (None, SPEC, {}, False, PoolStep.CREATE),
        (PoolRecord("p", SPEC), SPEC, LIVE, False, PoolStep.USE),
        (PoolRecord("p", SPEC, idle_since=10.0), SPEC, {}, False, PoolStep.USE),
        (PoolRecord("p", SPEC, deleting=True), SPEC, {}, False, PoolStep.WAIT),
        (PoolRecord("p", OTHER), SPEC, LIVE, True, PoolStep.WAIT),
        (PoolRecord("p", OTHER), SPEC, EXPIRED, True, PoolStep.REPLACE),
        (PoolRecord("p", OTHER), SPEC, {}, True, PoolStep.REPLACE),
    ],
)
def test_decide(record: PoolRecord | None, spec: dict, leases: dict, replace: bool, step: PoolStep) -> None:
    assert (
        decide(record, spec=spec, leases=leases, now=100.0, options=PoolOptions("p", replace=replace)) is step
    )


def test_another_spec_fails_naming_each_differing_field_with_both_values() -> None:
    with pytest.raises(RayInvalidInputError) as caught:
        decide(PoolRecord("p", OTHER), spec=SPEC, leases={}, now=100.0, options=PoolOptions("p"))
    message = str(caught.value)
    assert 'head.image (pool: "rayproject/ray:2.59.0", this run: "rayproject/ray:2.60.0")' in message
    assert "workers[0].replicas (pool: 3, this run: 2)" in message
    assert "head.cpu" not in message


@pytest.mark.parametrize(
    ("record", "leases", "expired"),
    [
        (PoolRecord("p", idle_since=10.0), {}, True),
        (PoolRecord("p", idle_since=60.0), {}, False),  # idle for 40 s of its 60
        (PoolRecord("p", idle_since=10.0), LIVE, False),
        (PoolRecord("p", idle_since=10.0), EXPIRED, True),
        (PoolRecord("p"), {}, False),  # never used: the run that created it is taking its lease
        (PoolRecord("p", idle_since=10.0, deleting=True), {}, False),  # a deletion is already under way
    ],
)
def test_idle_expired(record: PoolRecord, leases: dict, expired: bool) -> None:
    assert idle_expired(record, leases, now=100.0, idle_ttl=60.0) is expired


def test_live_holders_leaves_out_expired_leases() -> None:
    assert live_holders({"a": 101.0, "b": 99.0, "c": 150.0}, 100.0) == ["a", "c"]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": "Bad_Name"}, "pool: "),
        ({"name": "p", "idle_ttl": -1}, "pool.idle_ttl"),
        ({"name": "p", "lease_ttl": 1}, "pool.lease_ttl"),
    ],
)
def test_bad_pool_options_name_the_field(fields: dict, problem: str) -> None:
    with pytest.raises(RayInvalidInputError, match=problem.replace(".", r"\.")):
        PoolOptions(**fields)


def test_a_record_round_trips_through_plain_data() -> None:
    record = PoolRecord("p", SPEC, idle_since=1.5, deleting=True)
    assert PoolRecord(**json.loads(json.dumps(asdict(record)))) == record

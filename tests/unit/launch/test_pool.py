"""A pool as a task names it (bad input names the field), and which pools the janitor deletes: read from a
real local lease store with no cluster behind it (a pool whose cluster is gone is forgotten)."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import pytest

from airflow_ray_provider.clusters import LocalBackend
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch import pool_options
from airflow_ray_provider.launch.pool import PoolOptions, PoolRecord, delete_idle_pools

pytestmark = pytest.mark.unit


def test_a_pool_is_given_as_options_or_their_fields() -> None:
    assert pool_options(None) is None
    assert pool_options({"name": "eval", "idle_ttl": 0}) == PoolOptions("eval", idle_ttl=0)
    options = PoolOptions("eval", replace=True)
    assert pool_options(options) is options


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": "eval", "idle": 5}, "pool has unknown key(s) ['idle']"),
        ({"idle_ttl": 5}, "pool.name is required"),
        ("eval", "pool must be a mapping with a name, got str"),
        ({"name": "eval", "lease_ttl": 2}, "pool.lease_ttl must be at least 4 seconds"),
        ({"name": "Eval"}, "pool: "),
    ],
)
def test_a_bad_pool_names_its_field(value: Any, problem: str) -> None:
    with pytest.raises(RayInvalidInputError) as caught:
        pool_options(value)
    assert problem in str(caught.value)


def _pool(name: str, leases: dict[str, float], **record: Any) -> None:
    store = LocalBackend().lease_store()
    store.write(name, asdict(PoolRecord(name, idle_ttl=5, **record)))
    for holder, expires in leases.items():
        store.renew(name, holder, expires)


def test_the_janitor_deletes_idle_expired_pools_only_never_one_with_a_live_lease(local_registry: Any) -> None:
    now = time.time()
    _pool("expired", {}, idle_since=now - 10)
    _pool("held", {"run-a": now + 30}, idle_since=now - 10)  # a run leased it again
    _pool("fresh", {}, idle_since=now - 2)  # idle for 2 s of its 5
    _pool("all-dead", {"run-a": now - 20, "run-b": now - 8})  # both holders killed: idle since 8 s
    _pool("dead-lately", {"run-a": now - 1})  # its holder's lease expired 1 s ago
    _pool("deleting", {}, idle_since=now - 10, deleting=True, deleting_since=now - 60)  # another deleter's
    _pool("abandoned", {}, idle_since=now - 999, deleting=True, deleting_since=now - 901)  # its deleter died
    said: list[str] = []

    deleted = ["abandoned", "all-dead", "expired"]
    assert delete_idle_pools(LocalBackend(), said.append, dry_run=True) == deleted
    assert said == [] and len(LocalBackend().lease_store().pools()) == 7

    assert delete_idle_pools(LocalBackend(), said.append) == deleted
    assert said == [f"Forgot pool {name} (no cluster)" for name in deleted]
    assert LocalBackend().lease_store().pools() == ["dead-lately", "deleting", "fresh", "held"]
    assert LocalBackend().lease_store().read("expired") == (None, {})


def test_a_poll_interval_not_below_the_pools_heartbeat_is_refused_before_any_work(
    local_registry: Any,
) -> None:
    """A run renews its lease at its looks: looks further apart than ``lease_ttl / 4`` would let it lapse.
    Refused in one line naming both fields, by ``launch.run`` and the one-task operator, before any head."""
    from airflow_ray_provider.launch import LocalHead, run
    from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator

    problem = r"^poll_interval \(2 s\) must be below pool\.lease_ttl / 4 \(2 s\): .*raise pool\.lease_ttl$"
    pool = {"name": "eval", "lease_ttl": 8}
    assert pool_options(pool, 1.5) == PoolOptions("eval", lease_ttl=8)
    with pytest.raises(RayInvalidInputError, match=problem):
        pool_options(PoolOptions("eval", lease_ttl=8), 2)
    with pytest.raises(RayInvalidInputError, match=problem):
        run("python job.py", target=LocalHead(), pool=pool, poll_interval=2)
    with pytest.raises(RayInvalidInputError, match=problem):
        EphemeralRayJobOperator(task_id="t", entrypoint="python job.py", cluster_pool=pool, poll_interval=2)
    assert not local_registry.exists()  # no head, no pool folder


def test_a_pools_prices_are_checked_and_kept_as_a_table() -> None:
    """The pool's price table is checked as any (naming ``pool.prices``) and kept in its plain form."""
    options = pool_options({"name": "eval", "prices": {"CPU": 0.1, "currency": "USD"}})
    assert options is not None and options.prices is not None and options.prices["CPU"] == 0.1
    with pytest.raises(RayInvalidInputError, match=r"pool\.prices"):
        pool_options({"name": "eval", "prices": {"CPU": -1}})


@pytest.mark.parametrize(
    ("pool", "problem"),
    [
        ("[1]", "connection 'ray_pool': extra 'pool' must be a JSON object"),
        ("{nope", "connection 'ray_pool': extra 'pool' is not valid JSON"),
        ({"idle_ttl": 5}, "connection 'ray_pool' extra 'pool': pool.name is required"),
        ({"name": "eval", "cluster_spec": {"head": {"cpu": "x"}}}, "connection 'ray_pool' extra 'pool': "),
    ],
)
def test_a_connection_that_names_a_bad_pool_fails_before_any_work(
    pool: Any, problem: str, local_registry: Any
) -> None:
    """``SubmitRayJobOperator`` on a ``ray`` connection whose ``pool`` extra is bad: one line naming the
    connection and the field, before any head or pool folder exists."""
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
    from tests.fixtures.ray_job import StandInTI, context_for, drop_connection, set_connection

    set_connection("ray_pool", extra={"pool": pool})
    try:
        operator = SubmitRayJobOperator(task_id="t", ray_conn_id="ray_pool", entrypoint="python job.py")
        with pytest.raises(RayInvalidInputError) as caught:
            operator.execute(context_for(StandInTI(dag_id="d", task_id="t")))
    finally:
        drop_connection("ray_pool")
    assert str(caught.value).startswith(problem)
    assert not local_registry.exists()


def test_a_pools_connection_without_a_wait_is_refused_before_any_work(local_registry: Any) -> None:
    """A pool's lease ends with its task: a job left running after it could lose its cluster."""
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
    from tests.fixtures.ray_job import StandInTI, context_for, drop_connection, set_connection

    set_connection("ray_pool", extra={"pool": {"name": "eval"}})
    try:
        operator = SubmitRayJobOperator(
            task_id="t", ray_conn_id="ray_pool", entrypoint="python job.py", wait_for_completion=False
        )
        with pytest.raises(RayInvalidInputError, match=r"^wait_for_completion=False: a pool's lease"):
            operator.execute(context_for(StandInTI(dag_id="d", task_id="t")))
    finally:
        drop_connection("ray_pool")
    assert not local_registry.exists()

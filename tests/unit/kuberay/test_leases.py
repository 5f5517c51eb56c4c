"""The KubeRay pool store's pure parts: Lease names, times, the Role's Lease rule; the emulator's selector."""

from __future__ import annotations

import re

import pytest

from airflow_ray_provider.kuberay import role_manifest
from airflow_ray_provider.kuberay.client import BASE_RULES
from airflow_ray_provider.kuberay.leases import NAME_MAX, expiry, lease_name, micro_time
from tests.fixtures.kuberay import allowed
from tests.fixtures.kuberay_emulator import selects

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
POOL = "p" * 53  # the longest pool name (a RayCluster name)


@pytest.mark.unit
@pytest.mark.parametrize(
    "holder",
    ["raysubmit_AbC123", "a-b", "A_b", "manual__2024-01-01T00:00:00+00:00", "___", "x" * 400, "ünïcode"],
)
def test_every_holder_gets_a_valid_lease_name_of_its_own(holder):
    name = lease_name(POOL, holder)
    assert SUBDOMAIN.fullmatch(name) and len(name) <= NAME_MAX, name
    assert name.startswith(f"{lease_name(POOL)}.")


@pytest.mark.unit
def test_lease_names_keep_a_plain_holder_and_hash_one_that_had_to_change():
    assert lease_name("pool", "a-b") == "ray-pool.pool.a-b"
    assert lease_name("pool", "A_b") != lease_name("pool", "a-b") != lease_name("pool", "a_b")
    assert lease_name("pool", "x" * 400) != lease_name("pool", "x" * 401)
    assert lease_name("pool") == "ray-pool.pool" and lease_name("pool2") != lease_name("pool", "2")


@pytest.mark.unit
def test_expiry_is_renew_time_plus_the_duration_and_zero_when_free():
    renewed = 1767225600.123456
    lease = {"spec": {"holderIdentity": "a", "renewTime": micro_time(renewed), "leaseDurationSeconds": 15}}
    assert micro_time(renewed) == "2026-01-01T00:00:00.123456Z"
    assert expiry(lease) == pytest.approx(renewed + 15, abs=1e-6)
    assert expiry({"spec": {"renewTime": micro_time(renewed), "leaseDurationSeconds": 15}}) == 0.0  # released
    assert expiry({"spec": {"holderIdentity": "a"}}) == 0.0


@pytest.mark.unit
def test_the_role_grants_the_lease_verbs_of_the_store_and_no_patch_or_watch():
    rules = role_manifest("ns")["rules"]
    for verb in ("create", "get", "list", "update", "delete"):
        assert allowed(rules, group="coordination.k8s.io", resource="leases", verb=verb)
    for verb in ("patch", "watch", "deletecollection"):
        assert not allowed(BASE_RULES, group="coordination.k8s.io", resource="leases", verb=verb)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("a=1", True), ("a==1", True), ("a=2", False), ("a!=2", True), ("z!=2", True), ("a", True),
        ("!a", False), ("!z", True), ("a in (1, 2)", True), ("a notin (1)", False), ("z notin (1)", True),
        ("a=1,b=2", True), ("a=1,b=3", False), ("a in (1,2),b", True),
    ],
)  # fmt: skip
def test_the_emulator_selects_labels_as_the_api_server_does(selector, expected):
    assert selects(selector, {"a": "1", "b": "2"}) is expected


@pytest.mark.unit
def test_the_emulator_refuses_a_selector_it_cannot_parse():
    with pytest.raises(ValueError, match="a=1=2"):
        selects("a=1=2", {})

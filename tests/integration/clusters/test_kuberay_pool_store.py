"""The KubeRay pool store on the Kubernetes emulator: Leases as the API server treats them, the pool's lock
(exclusive across clients, taken over once a killed holder's Lease expires), records written with
``resourceVersion`` checks, run leases by pool, and the Role that covers exactly these calls.

No Ray head is needed: the store only speaks to the Kubernetes API. Each test uses pool names of its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from tests.fixtures.kuberay import CONTROLLER_AGENT, TEST_NAMESPACE
from tests.fixtures.pool_store import EXPECTED, concurrent_starts, two_runs

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{TEST_NAMESPACE}/leases"


@pytest.fixture()
def clients(kube_emulator: Any) -> Iterator[list[Any]]:
    """Two typed clients on two ``ApiClient``s (two deciders), closed after the test."""
    from airflow_ray_provider.kuberay import KubeRayClient

    apis = [kube_emulator.api_client(), kube_emulator.api_client()]
    try:
        yield [KubeRayClient(api, namespace=TEST_NAMESPACE) for api in apis]
    finally:
        for api in apis:
            api.close()


def _store(client: Any, **kwargs: Any) -> Any:
    from airflow_ray_provider.kuberay import KubeRayLeaseStore

    return KubeRayLeaseStore(client, **kwargs)


def _lease(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


def test_the_emulator_treats_leases_as_the_api_server_does(clients):
    """Create (409 AlreadyExists), read (404), replace and patch with a stale resourceVersion (409),
    delete preconditions, label selectors, and Lease validation (422)."""
    from kubernetes.client import CoordinationV1Api
    from kubernetes.client.exceptions import ApiException

    api = CoordinationV1Api(clients[0].api_client)
    ns = TEST_NAMESPACE

    def status(call: Any, *args: Any, **kwargs: Any) -> int:
        with pytest.raises(ApiException) as excinfo:
            call(*args, **kwargs)
        return excinfo.value.status

    first = api.create_namespaced_lease(ns, _lease("emu-a", holderIdentity="x"))
    try:
        assert status(api.create_namespaced_lease, ns, _lease("emu-a")) == 409
        assert status(api.read_namespaced_lease, "emu-missing", ns) == 404
        assert status(api.replace_namespaced_lease, "emu-missing", ns, _lease("emu-missing")) == 404
        stale = first.metadata.resource_version
        versioned = {"name": "emu-a", "resourceVersion": stale}
        second = api.replace_namespaced_lease(
            "emu-a", ns, {**_lease("emu-a", holderIdentity="y"), "metadata": versioned}
        )
        assert second.metadata.resource_version != stale and second.spec.holder_identity == "y"
        assert second.metadata.uid == first.metadata.uid  # the server keeps its own fields on a replace
        body = {
            **_lease("emu-a", holderIdentity="z"),
            "metadata": {"name": "emu-a", "resourceVersion": stale},
        }
        assert status(api.replace_namespaced_lease, "emu-a", ns, body) == 409
        assert (
            status(api.patch_namespaced_lease, "emu-a", ns, {"metadata": {"resourceVersion": stale}}) == 409
        )
        patched = api.patch_namespaced_lease(
            "emu-a", ns, {"metadata": {"labels": {"k": "v"}}}
        )  # no precondition
        assert (
            patched.spec.holder_identity == "y"
            and patched.metadata.resource_version != second.metadata.resource_version
        )
        assert (
            status(api.replace_namespaced_lease, "emu-a", ns, _lease("emu-b")) == 400
        )  # name differs from URL
        assert status(api.create_namespaced_lease, ns, _lease("Bad_Name")) == 422
        assert status(api.create_namespaced_lease, ns, _lease("emu-c", leaseDurationSeconds=0)) == 422
        with_version = {**_lease("emu-c"), "metadata": {"name": "emu-c", "resourceVersion": "1"}}
        assert status(api.create_namespaced_lease, ns, with_version) == 500  # as etcd's store answers
        assert [i.metadata.name for i in api.list_namespaced_lease(ns, label_selector="k=v").items] == [
            "emu-a"
        ]
        assert api.list_namespaced_lease(ns, label_selector="k in (w),!k").items == []
        assert "emu-a" in [
            i.metadata.name for i in api.list_namespaced_lease(ns, label_selector="k notin (w)").items
        ]
        assert status(api.list_namespaced_lease, ns, label_selector="k=v=w") == 400
        precondition = {"preconditions": {"resourceVersion": stale}}
        assert status(api.delete_namespaced_lease, "emu-a", ns, body=precondition) == 409
    finally:
        api.delete_namespaced_lease("emu-a", ns)
    assert status(api.read_namespaced_lease, "emu-a", ns) == 404
    assert status(api.delete_namespaced_lease, "emu-a", ns) == 404


def test_the_lock_admits_one_decider_at_a_time_across_clients(clients):
    """Six threads on two clients add one to a counter in the record under the lock: none is lost, no two
    hold the lock at once, and a decider that cannot get it in time gets ``TimeoutError``."""
    stores = [_store(client, lock_ttl=3, poll_interval=0.05) for client in clients]
    pool, inside, overlaps, errors = "lockpool", [], [], []

    def add_one(store: Any) -> None:
        try:
            with store.lock(pool, timeout=30):
                inside.append(1)
                overlaps.append(len(inside))
                record, _ = store.read(pool)
                count = int(record["fingerprint"]["n"]) if record else 0
                time.sleep(0.05)
                store.write(pool, {"cluster": pool, "fingerprint": {"n": str(count + 1)}})
                inside.pop()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=add_one, args=(stores[i % 2],)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert errors == [] and max(overlaps) == 1
        assert stores[0].read(pool)[0]["fingerprint"] == {"n": "6"}
        with stores[0].lock(pool, timeout=5):
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=r"lockpool.*held by"), stores[1].lock(pool, timeout=0.5):
                pass
            assert time.monotonic() - started >= 0.5
        with stores[1].lock(pool, timeout=1):  # free again once released
            pass
    finally:
        with stores[0].lock(pool, timeout=10):
            stores[0].write(pool, None)
    assert pool not in stores[0].pools()


def test_a_killed_holders_lock_is_taken_over_once_it_expires(clients, kube_emulator):
    """A process that holds the lock is SIGKILLed: the lock stays held until its Lease expires
    (``lock_ttl`` after its last renewal), then another decider takes it over."""
    from kubernetes.client import CoordinationV1Api

    from airflow_ray_provider.kuberay.leases import lease_name

    code = (
        "import sys, time\n"
        "from kubernetes import client\n"
        "from airflow_ray_provider.kuberay import KubeRayClient, KubeRayLeaseStore\n"
        "api = client.ApiClient(client.Configuration(host=sys.argv[1]))\n"
        f"store = KubeRayLeaseStore(KubeRayClient(api, namespace={TEST_NAMESPACE!r}), lock_ttl=2)\n"
        "with store.lock('deadpool', timeout=10):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(120)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, kube_emulator.url], stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO}, start_new_session=True,
    )  # fmt: skip
    store = _store(clients[0], lock_ttl=2, poll_interval=0.05)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        time.sleep(2.5)  # its renewals keep it held past one lock_ttl
        with pytest.raises(TimeoutError), store.lock("deadpool", timeout=0.3):
            pass
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        with store.lock("deadpool", timeout=10):
            waited = time.monotonic() - killed
            api = CoordinationV1Api(clients[0].api_client)
            taken = api.read_namespaced_lease(lease_name("deadpool"), TEST_NAMESPACE)
            assert taken.spec.lease_transitions == 1 and taken.spec.holder_identity.startswith(store.identity)
        assert waited <= 2.0 + 2.0  # at most one lock_ttl after its last renewal, plus polling on a busy host
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(10)


def test_a_stale_record_write_is_refused_and_made_again(clients, kube_emulator):
    """Another writer changes the pool's Lease between the store's read and its replace: the API refuses
    the replace (409), the store reads again and writes; both changes survive."""
    from kubernetes.client import CoordinationV1Api

    from airflow_ray_provider.kuberay.leases import lease_name

    other = CoordinationV1Api(clients[1].api_client)
    raced: list[str] = []
    store = _store(clients[0])
    find = store.leases.find

    def raced_find(name: str, **kwargs: Any) -> Any:
        found = find(name, **kwargs)
        if found is not None and not raced:
            raced.append(name)
            other.patch_namespaced_lease(name, TEST_NAMESPACE, {"metadata": {"annotations": {"other": "x"}}})
        return found

    store.leases.find = raced_find  # type: ignore[method-assign]  # the other writer strikes after a read
    plain = _store(clients[0])
    plain.write("racepool", {"cluster": "racepool", "fingerprint": {}})
    since = len(kube_emulator.calls)
    try:
        store.write("racepool", {"cluster": "racepool", "fingerprint": {"a": "1"}})
        lease = other.read_namespaced_lease(lease_name("racepool"), TEST_NAMESPACE)
        assert lease.metadata.annotations["other"] == "x"
        assert plain.read("racepool")[0]["fingerprint"] == {"a": "1"}
        puts = [c for c in kube_emulator.calls[since:] if c[1] == "PUT" and c[0] != CONTROLLER_AGENT]
        assert len(puts) == 2  # the refused one and the one on the new version
    finally:
        plain.write("racepool", None)
        with plain.lock("racepool", timeout=5):  # an unlock deletes a pool's Lease that has no record
            pass


def test_leases_are_renewed_released_and_listed_by_pool(clients):
    store = _store(clients[0])
    now = time.time()
    odd = "manual__2024-01-01T00:00:00+00:00/" + "x" * 300  # not a name, and too long: hashed
    try:
        store.renew("leasepool", "raysubmit_A", now + 60.25)
        store.renew("leasepool", odd, now + 30)
        store.renew("leasepool", "expired", now - 5)
        store.renew("otherpool", "raysubmit_A", now + 60)
        _, leases = store.read("leasepool")
        assert set(leases) == {"raysubmit_A", odd, "expired"}
        assert leases["raysubmit_A"] == pytest.approx(now + 60.25, abs=1e-3)
        assert leases["expired"] == pytest.approx(now - 5, abs=1e-3)  # expired leases are listed too
        store.renew("leasepool", "raysubmit_A", now + 90)
        assert store.read("leasepool")[1]["raysubmit_A"] == pytest.approx(now + 90, abs=1e-3)
        store.release("leasepool", "raysubmit_A")
        store.release("leasepool", "never-held")  # nothing to end
        assert set(store.read("leasepool")[1]) == {odd, "expired"}
        assert set(store.read("otherpool")[1]) == {"raysubmit_A"}
    finally:
        for pool in ("leasepool", "otherpool"):
            store.write(pool, None)
    assert store.read("leasepool") == (None, {}) and store.read("otherpool") == (None, {})


def test_the_record_round_trips_and_pools_lists_those_with_one(clients):
    from airflow_ray_provider.launch.pool import PoolRecord, fingerprint

    store = _store(clients[0])
    record = PoolRecord(cluster="recpool", fingerprint=fingerprint({"image": "ray:2.52", "env": {"A": "1"}}),
                        idle_since=1767225600.125, deleting=True)  # fmt: skip
    try:
        with store.lock("recpool", timeout=5):
            assert store.read("recpool") == (None, {})
            store.write("recpool", asdict(record))
        with store.lock("bare", timeout=5):  # a lock alone makes no pool
            pass
        assert PoolRecord(**store.read("recpool")[0]) == record
        assert "recpool" in store.pools() and "bare" not in store.pools()
    finally:
        with store.lock("recpool", timeout=5):
            store.write("recpool", None)
    assert "recpool" not in store.pools()


def test_two_runs_decide_on_leases_as_on_any_store(clients):
    """The decision sequence of :mod:`tests.fixtures.pool_store` on the KubeRay store."""
    store = _store(clients[0])
    try:
        trace, record = two_runs(store, "tworuns")
        assert trace == EXPECTED
        assert record.idle_since is None and record.cluster == "tworuns"
    finally:
        with store.lock("tworuns", timeout=5):
            store.write("tworuns", None)


def test_ten_runs_that_start_together_create_one_cluster(clients, kuberay_conn):
    """Ten runs through the store of the connection's backend decide under the lock: one creates, nine
    use its cluster, and ten leases are held."""
    from airflow_ray_provider.hooks.kuberay import backend_for_connection

    backend = backend_for_connection(kuberay_conn)
    store = backend.lease_store()
    try:
        assert store.namespace == TEST_NAMESPACE
        assert concurrent_starts(store, "tenruns", 10) == ["create"] + ["use"] * 9
        assert len(store.read("tenruns")[1]) == 10 and store.pools().count("tenruns") == 1
    finally:
        with store.lock("tenruns", timeout=10):
            store.write("tenruns", None)
        backend.close()


def test_the_role_grants_exactly_the_lease_verbs_the_store_uses(clients, kube_emulator):
    """Every Lease call of a store's whole life is in the Role, and the Role grants no Lease verb it does
    not use (the emulator does not enforce RBAC: its request log is checked against the rules)."""
    from airflow_ray_provider.kuberay.client import BASE_RULES
    from tests.fixtures.kuberay import allowed

    store = _store(clients[0], lock_ttl=3)
    since = len(kube_emulator.calls)
    try:
        two_runs(store, "rolepool")
    finally:
        with store.lock("rolepool", timeout=5):
            time.sleep(1.2)  # one renewal of the lock
            store.write("rolepool", None)
    used = set()
    for agent, method, path in kube_emulator.calls[since:]:
        if agent == CONTROLLER_AGENT:  # a test KubeRay controller an earlier test started
            continue
        match = re.fullmatch(rf"{LEASES}(/[^/]+)?", path)
        assert match, f"a call outside the namespace's Leases: {method} {path}"
        verb = {"POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "patch"}.get(method)
        used.add(verb or ("get" if match.group(1) else "list"))
    for verb in used:
        assert allowed(BASE_RULES, group="coordination.k8s.io", resource="leases", verb=verb), verb
    granted = {v for rule in BASE_RULES if "leases" in rule["resources"] for v in rule["verbs"]}
    assert used == granted

"""The one Ray-session rule of every workload, as a pure decision (the real runs are integration tests)."""

from __future__ import annotations

import sys
import threading

import pytest

from airflow_ray_provider.workloads.common.ray_session import (
    ADDRESS_ENV,
    JOB_CONFIG_ENV,
    RayCloser,
    SessionMode,
    plan_session,
)
from tests.fixtures.ray_address import closed_port

pytestmark = pytest.mark.unit

IN_JOB = {JOB_CONFIG_ENV: '{"runtime_env": {}, "metadata": {}}', ADDRESS_ENV: "10.0.0.5:6379"}


@pytest.mark.parametrize(
    ("address", "environ", "initialized", "mode", "ray_init_address"),
    [
        # Already initialised wins over everything, and is left alone.
        ("10.0.0.9:6379", IN_JOB, True, SessionMode.EXISTING, None),
        # An explicit address is used as given, in a job or not.
        ("10.0.0.9:6379", IN_JOB, False, SessionMode.ADDRESS, "10.0.0.9:6379"),
        ("ray://head:10001", {ADDRESS_ENV: "10.0.0.5:6379"}, False, SessionMode.ADDRESS, "ray://head:10001"),
        # "local" asks for a fresh local Ray: the private one, never a found cluster.
        ("local", IN_JOB, False, SessionMode.LOCAL, None),
        # The Job API's driver: the job's own cluster.
        (None, IN_JOB, False, SessionMode.JOB, "10.0.0.5:6379"),
        (None, {JOB_CONFIG_ENV: "{}"}, False, SessionMode.JOB, "auto"),
        # RAY_ADDRESS outside a job is the user's explicit choice.
        (None, {ADDRESS_ENV: "10.0.0.5:6379"}, False, SessionMode.ENV, "10.0.0.5:6379"),
        # Standalone: a private local Ray, whatever runs on the machine.
        (None, {}, False, SessionMode.LOCAL, None),
        ("", {ADDRESS_ENV: ""}, False, SessionMode.LOCAL, None),
    ],
)
def test_session_rule(
    address: str | None, environ: dict[str, str], initialized: bool, mode: SessionMode, ray_init_address: str
) -> None:
    session = plan_session(address, environ=environ, initialized=initialized)
    assert session.mode is mode
    assert session.address == ray_init_address
    assert session.owned is (mode is not SessionMode.EXISTING)


def test_each_rule_says_where_the_work_runs() -> None:
    env = plan_session(None, environ={ADDRESS_ENV: "10.0.0.5:6379"}, initialized=False).describe()
    assert "RAY_ADDRESS=10.0.0.5:6379 is set outside a Ray job" in env and "unset RAY_ADDRESS" in env
    job = plan_session(None, environ=IN_JOB, initialized=False).describe()
    assert job == "inside a Ray job: connecting to the job's cluster at 10.0.0.5:6379"
    local = plan_session(None, environ={}, initialized=False).describe()
    assert local.startswith("standalone: starting a private local Ray") and "not joined" in local
    assert "already initialised" in plan_session(None, environ={}, initialized=True).describe()
    assert plan_session("h:1", environ={}, initialized=False).describe() == "connecting to ray_address h:1"


def test_a_failed_private_start_stops_only_processes_in_its_own_folder(tmp_path) -> None:
    """What a timed-out ``ray.init`` leaves running names the private folder on its command line."""
    import subprocess
    import sys

    from airflow_ray_provider.workloads.common.ray_session import _kill_processes_in

    mine, other = str(tmp_path / "rayw1234abcd"), str(tmp_path / "rayw1234abcde")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = [subprocess.Popen([*sleep, f"--temp-dir={mine}"]), subprocess.Popen([*sleep, f"{mine}/logs"])]
    bystander = subprocess.Popen([*sleep, f"--temp-dir={other}"])
    try:
        _kill_processes_in(mine)
        assert [p.wait(timeout=10) for p in started] == [-9, -9]
        assert bystander.poll() is None
    finally:
        for p in [*started, bystander]:
            p.kill()
            p.wait()


def test_the_closer_runs_the_shutdown_beside_the_caller_and_waits_for_it() -> None:
    gate, order = threading.Event(), []

    def shutdown() -> None:
        gate.wait(5)
        order.append("shutdown")

    with RayCloser() as closer:
        closer.close(shutdown)
        order.append("artifact")  # the caller's work goes on while the shutdown waits
        gate.set()
    assert order == ["artifact", "shutdown"] and closer.closed_at is not None


def test_the_closer_raises_the_shutdowns_error_in_the_caller() -> None:
    def shutdown() -> None:
        raise RuntimeError("raylet stuck")

    closer = RayCloser()
    closer.close(shutdown)
    with pytest.raises(RuntimeError, match="raylet stuck"):
        closer.wait()
    closer.wait()  # raised once


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.9:6379", ("10.0.0.9", 6379)),
        ("ray://head.svc:10001", ("head.svc", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("head:6379/", ("head", 6379)),
        ("auto", None),
        ("head", None),
        ("head:port", None),
    ],
)
def test_the_probed_host_and_port_of_an_address(address: str, expected) -> None:
    from airflow_ray_provider.workloads.common.ray_session import address_host_port

    assert address_host_port(address) == expected


def test_an_address_nothing_answers_at_fails_naming_the_field_instead_of_waiting_for_ever(
    monkeypatch,
) -> None:
    """``ray.init`` retried an unreachable GCS without end (and ignored SIGTERM): the workload hung."""
    from airflow_ray_provider.workloads.common.errors import ConfigError
    from airflow_ray_provider.workloads.common.ray_session import check_ray_address

    monkeypatch.setitem(sys.modules, "ray", None)  # as in a process where no Ray is initialised
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    port = closed_port()
    with pytest.raises(ConfigError) as err:
        check_ray_address(f"127.0.0.1:{port}", seconds=0.3)
    message = str(err.value)
    assert message.startswith(
        f"ray_address '127.0.0.1:{port}': nothing accepts connections at 127.0.0.1:{port}"
    )
    assert "ConnectionRefusedError" in message and "leave ray_address out" in message
    monkeypatch.setenv(ADDRESS_ENV, f"127.0.0.1:{port}")  # the user's RAY_ADDRESS, outside a job
    with pytest.raises(ConfigError, match=r"RAY_ADDRESS \(environment\) .* or unset RAY_ADDRESS"):
        check_ray_address(None, seconds=0.3)


def test_an_address_that_answers_and_the_addresses_nobody_typed_are_not_refused(monkeypatch) -> None:
    import socket

    from airflow_ray_provider.workloads.common.ray_session import check_ray_address

    monkeypatch.setitem(sys.modules, "ray", None)  # as in a process where no Ray is initialised
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_ray_address(f"127.0.0.1:{server.getsockname()[1]}", seconds=0.3)  # answers: no error
    closed = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv(ADDRESS_ENV, closed)
    check_ray_address("local", seconds=0.3)  # a private Ray: nothing to probe
    monkeypatch.setenv(JOB_CONFIG_ENV, "{}")
    check_ray_address(None, seconds=0.3)  # inside a Ray job the address is Ray's own: not probed

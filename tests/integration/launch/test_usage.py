"""The usage record read from a live local head through the smallest reader: ``requests`` with the head's
token, no Airflow, no provider client. Jobs go in through the Job API's REST route; each one's own figures
(its tasks time their bodies) are what the record must agree with."""

from __future__ import annotations

import json
import re
import shlex
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch.usage import (
    UsageOptions,
    check_prices_on_cluster,
    parse_prices,
    usage_line,
)
from airflow_ray_provider.launch.usage.observer import collect_usage
from airflow_ray_provider.launch.usage.record import DRIVER_NOT_COUNTED

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: Two 1-CPU tasks that time their own bodies, and an actor, then the line the test reads.
TASKS = """
import json, time, ray
ray.init()

@ray.remote(num_cpus=1)
def work(seconds):
    start = time.time()
    while time.time() - start < seconds:
        pass
    return time.time() - start

@ray.remote(num_cpus=0)
class Holder:
    def ping(self):
        return 1

holder = Holder.remote()
ray.get(holder.ping.remote())
bodies = ray.get([work.remote(1.0) for _ in range(2)])
print("USAGE-TEST " + json.dumps({"cpu_s": sum(bodies)}), flush=True)
"""
#: Work in the driver only (an in-process engine): both cores of the machine may be busy, Ray counts none.
DRIVER_ONLY = """
import time
start = time.time()
while time.time() - start < 1.5:
    pass
"""


class TokenReader:
    """A :class:`~airflow_ray_provider.launch.usage.observer.DashboardReader`: ``requests`` and a token."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.headers = url, {"Authorization": f"Bearer {token}"}
        self.paths: list[str] = []

    def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        self.paths.append(path)
        answer = requests.get(self.url + path, params=params, headers=self.headers, timeout=10.0)
        answer.raise_for_status()
        return answer.json()

    def submit(self, code: str, **options: Any) -> str:
        """Submit ``python -c code`` and wait for its end; its submission id."""
        sid = f"usage-{uuid.uuid4().hex[:8]}"
        body = {"entrypoint": shlex.join(["python", "-c", code]), "submission_id": sid, **options}
        requests.post(
            f"{self.url}/api/jobs/", json=body, headers=self.headers, timeout=10.0
        ).raise_for_status()
        deadline = time.monotonic() + 120
        while self.get_json(f"/api/jobs/{sid}")["status"] not in ("SUCCEEDED", "FAILED", "STOPPED"):
            assert time.monotonic() < deadline, f"job {sid} did not end"
            time.sleep(0.2)
        return sid

    def logs(self, sid: str) -> str:
        return str(self.get_json(f"/api/jobs/{sid}/logs")["logs"])


@pytest.fixture(scope="module")
def head() -> Iterator[TokenReader]:
    """A local 2-CPU head with token auth, stopped at the module's end."""
    from airflow_ray_provider.local import LocalHeadConfig, read_token, start_head, stop_head

    info = start_head(LocalHeadConfig(num_cpus=2, auth=True), name="usage-reader")
    try:
        assert info.token_file is not None
        yield TokenReader(info.dashboard_url, read_token(info.token_file))
    finally:
        stop_head(info)


def test_a_record_read_through_a_reader_agrees_with_what_the_tasks_held(head: TokenReader) -> None:
    sid = head.submit(TASKS)
    job = head.get_json(f"/api/jobs/{sid}")
    assert job["status"] == "SUCCEEDED", head.logs(sid)
    seen = json.loads(re.search(r"^USAGE-TEST (\{.*\})$", head.logs(sid), re.M).group(1))  # type: ignore[union-attr]
    ran_h = (job["end_time"] - job["start_time"]) / 3_600_000

    record = collect_usage(head, UsageOptions("ephemeral", "usage-reader", True, submission_id=sid))

    assert record["counts"] == {"tasks": 2, "actors": 1}, record["not_available"]
    assert not [why for why in record["not_available"].values() if "did not answer" in why], record
    allocated_s = record["allocated"]["CPU"] * 3600
    if "tasks_unsettled" in record["not_available"]:  # Ray lost a span: that attempt counts start to end
        assert seen["cpu_s"] * 0.8 <= allocated_s <= 2 * record["phases"]["running_s"], (record, seen)
    else:
        assert allocated_s == pytest.approx(seen["cpu_s"], rel=0.2), (record, seen)
    assert record["reserved"]["CPU"] == pytest.approx(2 * ran_h, rel=0.02) and record["basis"] == "cluster"
    assert record["phases"]["queued_s"] is not None, record["not_available"]  # the supervisor was found
    assert record["utilisation"]["allocated_cpu"] > 0 and "allocated_cpu" not in record["not_available"]
    assert {"/api/v0/nodes", "/api/v0/tasks", "/api/v0/actors", "/logical/actors"} <= set(head.paths)


def test_a_driver_only_job_shows_allocated_na_unless_the_entrypoint_reserves_cpu(head: TokenReader) -> None:
    alone = head.submit(DRIVER_ONLY)
    record = collect_usage(head, UsageOptions("ephemeral", "usage-reader", True, submission_id=alone))
    assert record["job_status"] == "SUCCEEDED" and (record["phases"]["running_s"] or 0.0) >= 1.5, record
    assert record["not_available"]["allocated_cpu"] == DRIVER_NOT_COUNTED
    assert record["utilisation"]["allocated_cpu"] is None and "allocated n/a (" in usage_line(record)

    reserved = head.submit(DRIVER_ONLY, entrypoint_num_cpus=1)
    request = UsageOptions("ephemeral", "usage-reader", True, submission_id=reserved, entrypoint={"CPU": 1.0})
    counted = collect_usage(head, request)
    running_h = (counted["phases"]["running_s"] or 0.0) / 3600
    assert counted["allocated"]["CPU"] == pytest.approx(running_h, rel=0.01), counted
    assert "allocated_cpu" not in counted["not_available"] and counted["utilisation"]["allocated_cpu"]


def test_prices_are_checked_against_the_live_heads_resources(head: TokenReader) -> None:
    prices = parse_prices({"CPU": 0.05, "memory_gib": 0.01})
    assert prices is not None and check_prices_on_cluster(head, prices) is None
    tpu = parse_prices({"CPU": 0.05, "TPU": 4.0})
    assert tpu is not None
    with pytest.raises(RayInvalidInputError, match=r"\['TPU'\].*does not have"):
        check_prices_on_cluster(head, tpu)

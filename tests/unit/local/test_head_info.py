"""A head's recorded info: its JSON round trip, and info that records no job agent."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from airflow_ray_provider.local import LocalHeadInfo, agent_answers

OLD_RECORD = {
    "name": "nightly-1a2b", "pid": 4242, "pgid": 4242, "temp_dir": "/tmp/rayh-x",
    "dashboard_url": "http://127.0.0.1:8265", "gcs_address": "127.0.0.1:6379", "token_file": None,
}  # fmt: skip

pytestmark = pytest.mark.unit


def test_info_without_an_agent_url_reads_without_one_and_info_round_trips() -> None:
    """Info that records no ``agent_url`` reads, and is not waited on for an agent; info keeps its agent
    URL through the JSON round trip."""
    old = LocalHeadInfo.from_dict(OLD_RECORD)
    assert old.agent_url is None
    assert agent_answers(old)

    new = LocalHeadInfo(**{**OLD_RECORD, "agent_url": "http://127.0.0.1:52365"})
    assert LocalHeadInfo.from_dict(asdict(new)) == new

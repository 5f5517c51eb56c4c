"""A head's recorded info: what a registry written before a field existed still reads as."""

from __future__ import annotations

from airflow_ray_provider.local.head import LocalHeadInfo, agent_answers

OLD_RECORD = {
    "name": "nightly-1a2b", "pid": 4242, "pgid": 4242, "temp_dir": "/tmp/rayh-x",
    "dashboard_url": "http://127.0.0.1:8265", "gcs_address": "127.0.0.1:6379", "token_file": None,
}  # fmt: skip


def test_info_recorded_before_the_agent_url_reads_without_one_and_round_trips() -> None:
    """A head an older provider registered (no ``agent_url``) is still found, and is not waited on for
    an agent it never recorded; new info keeps its agent URL through the JSON round trip."""
    old = LocalHeadInfo.from_dict(OLD_RECORD)
    assert old.agent_url is None
    assert agent_answers(old)

    new = LocalHeadInfo(**{**OLD_RECORD, "agent_url": "http://127.0.0.1:52365"})
    assert LocalHeadInfo.from_dict(new.to_dict()) == new

"""KubeRay's refusal read from a RayCluster's events, and the Warning summary of wait messages."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_ray_provider.kuberay import ClusterEvent, events_of, refusal_event, warning_summary


def _event(reason: str, minute: int, kind: str = "Warning", uid: str = "u1", count: int = 1) -> ClusterEvent:
    at = datetime(2024, 1, 1, 0, minute, tzinfo=timezone.utc)
    return ClusterEvent(kind, reason, f"{reason} text", count=count, uid=uid, last_seen=at)


@pytest.mark.unit
def test_refusal_is_the_latest_invalid_spec_or_metadata_warning():
    events = [
        _event("FailedCreateHeadPod", 1),
        _event("InvalidRayClusterSpec", 2),
        _event("InvalidRayClusterMetadata", 3),
        _event("InvalidRayClusterSpec", 4, kind="Normal"),
    ]
    found = refusal_event(events)
    assert found is not None and found.reason == "InvalidRayClusterMetadata"
    assert refusal_event([_event("FailedCreateHeadPod", 1)]) is None  # pod failures are retried, not terminal


@pytest.mark.unit
def test_summary_lists_recent_warnings_newest_first_and_counts_repeats():
    events = [_event(f"R{i}", i) for i in range(5)] + [
        _event("Quota", 9, count=4),
        _event("Ok", 10, "Normal"),
    ]
    assert warning_summary(events, limit=2) == "Quota: Quota text (x4); R4: R4 text"
    assert warning_summary([]) == ""


@pytest.mark.unit
def test_events_of_an_earlier_cluster_with_the_same_name_are_ignored():
    events = [_event("InvalidRayClusterSpec", 1, uid="old"), _event("FailedCreateHeadPod", 2, uid="new")]
    assert [e.reason for e in events_of(events, "new")] == ["FailedCreateHeadPod"]
    assert len(events_of(events, "")) == 2

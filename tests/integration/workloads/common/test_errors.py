"""A workload error raised on a Ray worker reaches the driver as itself, on a private local Ray."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from airflow_ray_provider.workloads.common.errors import DataError, WorkloadError, workload_error_from
from airflow_ray_provider.workloads.common.ray_session import SessionMode, ray_session

pytestmark = pytest.mark.integration


def _check_labels() -> None:
    raise DataError("label column 'clicked' must hold 0/1; found values such as [2]")


def test_worker_side_data_error_reaches_the_driver_as_data_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    root = tempfile.mkdtemp(prefix="arpe", dir="/tmp")  # short: Ray's sockets live below it
    monkeypatch.setenv("TMPDIR", root)  # where the private Ray's folder goes: check it is removed
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    try:
        with ray_session() as session:
            assert session.mode is SessionMode.LOCAL and ray.is_initialized()
            assert [n for n in os.listdir(root) if n.startswith("rayw")], "the private Ray's folder"
            with ray_session() as inner:  # a nested session uses this Ray and leaves it running
                assert inner.mode is SessionMode.EXISTING
            assert ray.is_initialized()

            with pytest.raises(WorkloadError) as info:
                ray.get(ray.remote(_check_labels).options(max_retries=0).remote())
            found = workload_error_from(info.value)
        assert not ray.is_initialized()
        assert os.listdir(root) == [], "the private Ray's folder is removed"
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    assert type(found) is DataError
    assert str(found) == "label column 'clicked' must hold 0/1; found values such as [2]"

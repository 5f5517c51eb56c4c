"""Finding the workload error behind wrappers (the Ray round trip itself is an integration test)."""

from __future__ import annotations

import pytest

from airflow_ray_provider.workloads.common.errors import DataError, workload_error_from

pytestmark = pytest.mark.unit


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_error_itself_and_through_cause_and_context() -> None:
    data = DataError("label column 'y' must hold 0/1")
    assert workload_error_from(data) is data
    try:
        try:
            raise data
        except DataError as inner:
            raise RuntimeError("UDF failed to process a data block.") from inner
    except RuntimeError as outer:
        assert workload_error_from(outer) is data
    try:
        try:
            raise data
        except DataError:
            raise KeyError("while handling it") from None
    except KeyError as outer:
        assert outer.__suppress_context__ and workload_error_from(outer) is data


def test_nothing_found_and_cycles_end() -> None:
    assert workload_error_from(ValueError("x")) is None
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert workload_error_from(a) is None

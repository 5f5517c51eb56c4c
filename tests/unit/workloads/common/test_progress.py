"""Progress lines: the same reporter for rows (evaluation) and zones (zone training)."""

from __future__ import annotations

import logging
import time

import pytest

from airflow_ray_provider.workloads.common.progress import Progress

pytestmark = pytest.mark.unit


def test_rows_line_has_count_share_rate_and_elapsed() -> None:
    progress = Progress(20_000, "rows", 5.0)
    progress.add(8_000)
    progress.add(4_000)
    line = progress.line(progress.started + 4.0)
    assert line.startswith("rows: 12000/20000 done, 8000 remaining (60.0%) | 3000 rows/s (last 3000) | ")
    assert line.endswith(" | 4.0s elapsed")
    assert "succeeded" not in line


def test_outcomes_and_the_callers_detail() -> None:
    finals: list[bool] = []

    def detail(final: bool) -> str:
        finals.append(final)
        return "7 tasks done" if final else "7 tasks done, 3 in flight"

    progress = Progress(24, "zones", 5.0, detail=detail, show_outcomes=True)
    progress.add(2)
    progress.add(3, failed=1)
    assert (progress.done, progress.succeeded, progress.failed) == (5, 4, 1)
    line = progress.line(progress.started + 2.0)
    assert line == (
        "zones: 5/24 done (4 succeeded, 1 failed), 19 remaining (20.8%) | 2.5 zones/s (last 2.5) "
        "| 7 tasks done, 3 in flight | 2.0s elapsed"
    )
    assert progress.line(progress.started + 2.0, final=True).endswith("| 7 tasks done | 2.0s elapsed")
    assert finals == [False, True]


def test_lines_go_to_the_callers_logger_at_most_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.workloads.caller")
    progress = Progress(10, "zones", 3600.0, logger=logger)
    with caplog.at_level(logging.INFO, logger="tests.workloads.caller"):
        progress.add(4)
        progress.maybe_report()  # the interval has not passed: nothing
        assert not caplog.records
        progress.report(final=True)
    assert [r.name for r in caplog.records] == ["tests.workloads.caller"]
    assert caplog.records[0].getMessage().startswith("zones: 4/10 done, 6 remaining (40.0%)")


def test_reporting_thread_logs_while_running_and_a_closing_line(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[bool] = []

    def detail(final: bool) -> str:
        seen.append(final)
        return ""

    progress = Progress(100, "rows", 0.05, detail=detail)
    with caplog.at_level(logging.INFO, logger="airflow_ray_provider.workloads.common.progress"):
        with progress.reporting():
            progress.add(50)
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
        progress.add(50)  # after the closing line: not reported again
    assert seen[0] is False and seen[-1] is True and seen.count(True) == 1
    assert caplog.records[-1].getMessage().startswith("rows: 50/100 done")
    assert {r.name for r in caplog.records} == {"airflow_ray_provider.workloads.common.progress"}

"""The HTML report (inline SVG charts) and the markdown summary, rendered from a decision."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_ray_provider.templates.champion_challenger.decision import (
    DecisionPolicy,
    Guardrail,
    PrimaryMetric,
    SliceRule,
    evaluate_policy,
)
from airflow_ray_provider.templates.champion_challenger.report import (
    MAX_SLICE_BARS,
    build_report,
    write_report,
)
from airflow_ray_provider.templates.collect import summarize_evaluation
from tests.fixtures.templates import metrics_document

pytestmark = pytest.mark.unit

POLICY = DecisionPolicy(
    PrimaryMetric("roc_auc", 0.005),
    (Guardrail("log_loss", 0.01),),
    SliceRule(max_regression=0.02, max_regressed_slices=1),
)


def _report(doc: dict, tmp_path: Path):
    summary = summarize_evaluation(doc, artifact_uri=str(tmp_path))
    return summary, build_report(summary, evaluate_policy(POLICY, summary), policy=POLICY, title="t <1>")


def test_report_has_one_chart_per_metric_and_the_slice_deltas(tmp_path: Path) -> None:
    slices = {f"zone=z{i}": 0.01 for i in range(5)} | {"zone=<b>": -0.05, "zone=worse": -0.04}
    doc = metrics_document(lifts={"roc_auc": (0.02, 0.01, 0.03)}, slice_deltas=slices)
    _, report = _report(doc, tmp_path)
    html = report.html
    pairs = re.findall(r'<svg class="chart pair"', html)
    assert len(pairs) == 7  # every metric with a direction (mean/observed CTR have none)
    bars = re.findall(r'<rect class="bar" data-value="([^"]+)"[^>]*height="([\d.]+)"', html)
    assert len(bars) == 2 * 7 + 7 + 7  # pairs, lift rows, slice rows
    assert all(float(h) > 0 for _, h in bars)
    assert html.count('<g class="ci"') >= 7 + 6  # challenger whiskers + lift intervals
    assert "KEEP CHAMPION" in html and "zone=&lt;b&gt;" in html and "<b>)" not in html
    assert "<title>t &lt;1&gt;</title>" in html and "http" not in html.split("<body>")[0]  # no CDN
    assert "2 of 7 slices regress" in html


def test_markdown_summary_lists_decision_metrics_and_reasons(tmp_path: Path) -> None:
    doc = metrics_document(lifts={"roc_auc": (0.02, 0.01, 0.03)}, slice_deltas={"zone=a": 0.01})
    _, report = _report(doc, tmp_path)
    md = report.markdown
    assert md.startswith("## Decision: **promote** (challenger vs champion)")
    assert "| roc_auc | 0.7000 | 0.7200 | +0.0200 | [+0.0100, +0.0300] |" in md
    assert md.count("\n- [pass]") == 3 and md.endswith(f"Report: {tmp_path}/report.html")


def test_many_slices_are_capped_to_worst_and_best(tmp_path: Path) -> None:
    doc = metrics_document(slice_deltas={f"zone=z{i:03d}": (i - 50) / 1000 for i in range(100)})
    _, report = _report(doc, tmp_path)
    slice_svg = report.html.split("id='slice-chart'>")[1]
    assert slice_svg.count('class="bar"') == MAX_SLICE_BARS
    assert "zone=z000" in slice_svg and "zone=z099" in slice_svg and "zone=z050" not in slice_svg
    assert "100 slices; showing the 20 worst and 20 best" in report.html


def test_report_is_written_beside_the_artifact(tmp_path: Path) -> None:
    _, report = _report(metrics_document(), tmp_path)
    paths = write_report(str(tmp_path), report)
    assert Path(paths["html"]).read_text() == report.html
    assert Path(paths["markdown"]).read_text() == report.markdown


def test_a_whisker_never_goes_below_zero() -> None:
    """calibration_error 0.004 with a delta CI of [-0.006, +0.002] used to draw a whisker down to -0.002."""
    from airflow_ray_provider.templates.champion_challenger.report import challenger_interval

    assert challenger_interval(0.004, {"ci_low": -0.006, "ci_high": 0.002}) == (0.0, 0.006)
    assert challenger_interval(0.8, {"ci_low": -0.01, "ci_high": 0.02}) == pytest.approx((0.79, 0.82))
    assert challenger_interval(0.8, {"ci_low": None, "ci_high": None}) is None


def test_the_lift_chart_labels_calibration_ratio_as_closer_to_one() -> None:
    """Its bar is the reduction of |ratio - 1| (ratio 1.10 -> 0.95: +0.05 right, table delta -0.15)."""
    from airflow_ray_provider.templates.champion_challenger.report import lift_chart

    summary = {
        "baseline": "champion",
        "metric_directions": {"calibration_ratio": "target_1", "roc_auc": "higher"},
        "metrics": {
            "champion": {"calibration_ratio": 1.10, "roc_auc": 0.70},
            "challenger": {"calibration_ratio": 0.95, "roc_auc": 0.71},
        },
        "deltas": {"challenger": {"calibration_ratio": {"delta": -0.15}, "roc_auc": {"delta": 0.01}}},
    }
    svg = lift_chart(summary, "challenger", ["calibration_ratio", "roc_auc"], None)
    assert "calibration_ratio (closer to 1)" in svg and ">roc_auc<" in svg

"""The HTML report opened in a real headless Chromium: every chart lays out with visible bars."""

from __future__ import annotations

import html
import json
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
from airflow_ray_provider.templates.champion_challenger.report import build_report, write_report
from airflow_ray_provider.templates.collect import summarize_evaluation
from tests.fixtures.templates import chromium, chromium_path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        chromium_path() is None,
        reason="headless Chromium is not installed: apt-get install -y --no-install-recommends chromium",
    ),
]

#: Every ``<text>`` of a chart whose laid-out box reaches past its ``<svg>``: the browser cuts it there.
CLIPPED_TEXTS = """
function clippedTexts() {
  return [...document.querySelectorAll('svg text')].filter(t => {
    const b = t.getBoundingClientRect(), s = t.ownerSVGElement.getBoundingClientRect();
    return b.left < s.left - 0.5 || b.right > s.right + 0.5;
  }).map(t => t.textContent);
}
"""

# Appended to a copy of the report only: measures the laid-out size of every bar after rendering.
MEASURE = (
    """<script>"""
    + CLIPPED_TEXTS
    + """
const bars = [...document.querySelectorAll('rect.bar')].map(r => {
  const b = r.getBoundingClientRect(); return [b.width, b.height]; });
const out = {svgs: document.querySelectorAll('svg').length, bars: bars, clipped: clippedTexts()};
const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script></body>"""
)


def test_report_charts_render_in_headless_chromium(tmp_path: Path, eval_document: dict) -> None:
    policy = DecisionPolicy(PrimaryMetric("roc_auc", 0.005), slice_rule=SliceRule(max_regression=0.02))
    summary = summarize_evaluation(eval_document, artifact_uri=str(tmp_path))
    report = build_report(summary, evaluate_policy(policy, summary), policy=policy)
    html_path = Path(write_report(str(tmp_path), report)["html"])
    probe = tmp_path / "probe.html"
    probe.write_text(report.html.replace("</body>", MEASURE))

    dom = chromium(["--dump-dom", f"file://{probe}"])
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom.stdout, re.S)
    assert found, "the page did not render (no measurement in the DOM)"
    measured = json.loads(html.unescape(found.group(1)))
    assert measured["svgs"] == 7 + 2  # one per metric, the lift chart, the slice chart
    assert len(measured["bars"]) == 2 * 7 + 7 + 10
    assert all(w >= 1 and h >= 1 for w, h in measured["bars"]), measured["bars"]
    assert "calibration_ratio (closer to 1)" in report.html  # the longest label of the lift chart
    assert measured["clipped"] == []  # every label and title whole
    assert "<svg" in dom.stdout and 'class="bar"' in dom.stdout

    shot = tmp_path / "report.png"
    result = chromium([f"--screenshot={shot}", "--window-size=1100,1600", f"file://{html_path}"])
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses to ~5 KB


# Appended to a copy of the 50-model report: the leaderboard's laid-out rows and its scrolling box.
MEASURE_BOARD = (
    """<script>"""
    + CLIPPED_TEXTS
    + """
const rows = [...document.querySelectorAll('#leaderboard tr[data-model]')].map(r => {
  const b = r.getBoundingClientRect(); return [r.dataset.model, b.height, r.cells.length]; });
const box = document.querySelector('#leaderboard').getBoundingClientRect();
const chart = [...document.querySelectorAll('#leaderboard-chart rect.bar')].map(r => {
  const b = r.getBoundingClientRect(); return [b.width, b.height]; });
const head = document.querySelector('#leaderboard th').getBoundingClientRect();
const out = {rows: rows, box: [box.width, box.height], chart: chart, head: head.height,
             winner: [...document.querySelectorAll('#leaderboard tr.winner')].map(r => r.dataset.model),
             clipped: clippedTexts()};
const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script></body>"""
)


def test_a_fifty_model_leaderboard_renders_readably_in_headless_chromium(tmp_path: Path) -> None:
    from tests.fixtures.challengers import many_challengers_document

    lifts = {
        f"candidate_{i:02d}": (0.03 - 0.001 * i, 0.03 - 0.001 * i - 0.004, 0.03 - 0.001 * i + 0.004)
        for i in range(50)
    }
    doc = many_challengers_document(
        {name: {"roc_auc": lift} for name, lift in lifts.items()}
        | {"candidate_00": {"roc_auc": lifts["candidate_00"], "log_loss": (0.05, 0.04, 0.06)}},
        slices=4,
    )
    policy = DecisionPolicy(
        PrimaryMetric("roc_auc", 0.005), (Guardrail("log_loss", 0.01),), SliceRule(max_regression=0.02)
    )
    summary = summarize_evaluation(doc, artifact_uri=str(tmp_path))
    decision = evaluate_policy(policy, summary)
    report = build_report(summary, decision, policy=policy)
    probe = tmp_path / "probe.html"
    probe.write_text(report.html.replace("</body>", MEASURE_BOARD))

    dom = chromium(["--dump-dom", "--window-size=1280,900", f"file://{probe}"])
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom.stdout, re.S)
    assert found, "the page did not render (no measurement in the DOM)"
    measured = json.loads(html.unescape(found.group(1)))
    assert [r[0] for r in measured["rows"]] == sorted(lifts)  # best lift first, all 50
    assert all(10 <= height <= 40 for _, height, _ in measured["rows"]), measured["rows"][:3]  # one line each
    assert {cells for _, _, cells in measured["rows"]} == {8 + 3 + 1}  # 8 columns, 3 checks, the outcome
    assert 0 < measured["box"][1] <= 650 and measured["head"] > 0  # a scrolling box, not a 2,000 px table
    assert len(measured["chart"]) == 50 and all(w >= 1 and h >= 1 for w, h in measured["chart"])
    # candidate_00 has the best lift but breaks the log_loss guardrail: the next best wins.
    assert measured["winner"] == [decision.winner] == ["candidate_01"]
    assert measured["clipped"] == []

    shot = tmp_path / "board.png"
    result = chromium([f"--screenshot={shot}", "--window-size=1280,1600", f"file://{probe}"])
    assert result.returncode == 0 and shot.exists() and shot.stat().st_size > 20_000, result.stderr[-2000:]

"""The HTML report opened in a real headless Chromium: every chart lays out with visible bars."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from airflow_ray_provider.operators.metrics import summarize_evaluation
from airflow_ray_provider.templates.champion_challenger.decision import (
    DecisionPolicy,
    PrimaryMetric,
    SliceRule,
    evaluate_policy,
)
from airflow_ray_provider.templates.champion_challenger.report import build_report, write_report
from tests.fixtures.templates import chromium, chromium_path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        chromium_path() is None,
        reason="headless Chromium is not installed: apt-get install -y --no-install-recommends chromium",
    ),
]

# Appended to a copy of the report only: measures the laid-out size of every bar after rendering.
MEASURE = """<script>
const bars = [...document.querySelectorAll('rect.bar')].map(r => {
  const b = r.getBoundingClientRect(); return [b.width, b.height]; });
const out = {svgs: document.querySelectorAll('svg').length, bars: bars};
const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script></body>"""


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
    assert "<svg" in dom.stdout and 'class="bar"' in dom.stdout

    shot = tmp_path / "report.png"
    result = chromium([f"--screenshot={shot}", "--window-size=1100,1600", f"file://{html_path}"])
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses to ~5 KB

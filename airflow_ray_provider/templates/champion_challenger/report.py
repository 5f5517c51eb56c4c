"""The champion-vs-challenger report: one self-contained HTML file (inline SVG) and a markdown summary.

Inputs are the collector's summary (the XCom of
:class:`~airflow_ray_provider.templates.collect.CollectRayMetricsOperator`) and the decision;
output is text. :func:`write_report` puts both files beside the artifact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from typing import Any

from airflow_ray_provider.templates.champion_challenger import leaderboard
from airflow_ray_provider.templates.champion_challenger.decision import Decision, DecisionPolicy, improvement
from airflow_ray_provider.templates.champion_challenger.svg import (
    BAD,
    GOOD,
    NEUTRAL,
    HBar,
    hbar_chart,
    pair_chart,
)

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
MAX_SLICE_BARS = 40
_OUTCOME_STYLE = {"promote": ("#2e7d32", "PROMOTE"), "keep_champion": ("#c62828", "KEEP CHAMPION")}
_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#212121;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}.banner{padding:12px 16px;border-radius:6px;color:#fff}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:8px}
.pass{color:#2e7d32}.fail{color:#c62828}.unknown{color:#ef6c00}.muted{color:#757575;font-size:12px}
"""


@dataclass(frozen=True)
class Report:
    """The rendered report."""

    html: str
    markdown: str


def chart_metrics(summary: dict[str, Any], policy: DecisionPolicy | None) -> list[str]:
    """Metrics worth a chart: comparable (a direction other than ``none``), policy metrics first."""
    directions = summary.get("metric_directions") or {}
    base = (summary.get("metrics") or {}).get(summary["baseline"]) or {}
    names = [*(policy.metrics if policy else ()), *directions]
    keep = [m for m in dict.fromkeys(names) if directions.get(m) not in (None, "none")]
    return [m for m in keep if isinstance(base.get(m), (int, float))]


def _value(summary: dict[str, Any], model: str, metric: str) -> float | None:
    value = ((summary.get("metrics") or {}).get(model) or {}).get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _delta(summary: dict[str, Any], challenger: str, metric: str) -> dict[str, Any]:
    return ((summary.get("deltas") or {}).get(challenger) or {}).get(metric) or {}


def metric_charts(summary: dict[str, Any], challenger: str, metrics: list[str]) -> list[str]:
    """One champion-vs-challenger bar pair per metric, the challenger with its CI."""
    baseline, charts = summary["baseline"], []
    for metric in metrics:
        base, cand = _value(summary, baseline, metric), _value(summary, challenger, metric)
        if base is None or cand is None:
            continue
        interval = challenger_interval(base, _delta(summary, challenger, metric))
        charts.append(pair_chart(metric, (baseline, challenger), (base, cand), interval))
    return charts


def challenger_interval(base: float, stats: dict[str, Any]) -> tuple[float, float] | None:
    """The challenger's value range implied by the delta's CI, clipped at 0 (no reported metric is negative:
    a whisker of ``calibration_error`` below 0 would show an impossible value).

    :param base: the champion's value.
    :param stats: the delta's statistics (``ci_low``, ``ci_high``).
    """
    low, high = stats.get("ci_low"), stats.get("ci_high")
    if low is None or high is None:
        return None
    return max(0.0, base + low), max(0.0, base + high)


def lift_label(metric: str, direction: str) -> str:
    """A lift chart row's label; says how a ``target_1`` metric is measured (its bar is the reduction of
    ``|value - 1|``, which can have the opposite sign of the table's raw delta)."""
    return f"{metric} (closer to 1)" if direction == "target_1" else metric


def lift_chart(
    summary: dict[str, Any], challenger: str, metrics: list[str], policy: DecisionPolicy | None
) -> str:
    """Improvement of the challenger per metric (right is better), with bootstrap CIs."""
    directions, baseline, rows = summary["metric_directions"], summary["baseline"], []
    for metric in metrics:
        base, cand = _value(summary, baseline, metric), _value(summary, challenger, metric)
        if base is None or cand is None:
            continue
        lift, direction = improvement(directions[metric], base, cand), directions[metric]
        stats, low, high = _delta(summary, challenger, metric), None, None
        if (
            direction in ("higher", "lower")
            and stats.get("ci_low") is not None
            and stats.get("ci_high") is not None
        ):
            sign = 1.0 if direction == "higher" else -1.0
            low, high = sorted((sign * stats["ci_low"], sign * stats["ci_high"]))
        color = (
            GOOD
            if (low if low is not None else lift) > 0
            else BAD
            if (high if high is not None else lift) < 0
            else NEUTRAL
        )
        rows.append(HBar(lift_label(metric, direction), lift, low, high, color))
    refs = (
        ((policy.primary.min_lift, f"min lift {policy.primary.min_lift:g}"),)
        if policy and policy.primary.min_lift
        else ()
    )
    return hbar_chart(
        f"{challenger} vs {baseline}: improvement per metric (right = better, 95% CI)", rows, refs=refs
    )


def slice_rows(summary: dict[str, Any], challenger: str, metric: str, limit: float) -> list[HBar]:
    """Per-slice improvement of ``metric`` (worst first); red where the regression exceeds ``limit``."""
    direction, baseline = summary["metric_directions"].get(metric), summary["baseline"]
    table: dict[str, dict[str, float]] = {}
    for row in (summary.get("slices") or {}).get("rows") or ():
        value = row.get(metric)
        if row.get("model") in (baseline, challenger) and isinstance(value, (int, float)):
            table.setdefault(str(row["slice"]), {})[row["model"]] = float(value)
    bars = []
    for name, values in table.items():
        if baseline in values and challenger in values and direction not in (None, "none"):
            lift = improvement(direction, values[baseline], values[challenger])
            bars.append(HBar(name, lift, color=BAD if -lift > limit else GOOD if lift > 0 else NEUTRAL))
    return sorted(bars, key=lambda bar: bar.value)


def slice_chart(summary: dict[str, Any], challenger: str, policy: DecisionPolicy | None) -> tuple[str, str]:
    """The per-slice delta chart and a note on what it shows."""
    metric = (policy.slice_metric if policy else None) or (policy.primary.metric if policy else None)
    metric = metric or next(iter(chart_metrics(summary, None)), None)
    if metric is None:
        return "", "No comparable metric for slices."
    limit = policy.slice_rule.max_regression if policy and policy.slice_rule else 0.0
    bars = slice_rows(summary, challenger, metric, limit)
    if not bars:
        return "", f"The evaluation has no per-slice values of {metric}."
    note = f"{len(bars)} slices"
    if len(bars) > MAX_SLICE_BARS:
        half = MAX_SLICE_BARS // 2
        note += f"; showing the {half} worst and {half} best"
        bars = bars[:half] + bars[-half:]
    refs = ((-limit, f"-{limit:g} limit"),) if limit else ()
    title = f"Per-slice improvement of {metric} ({challenger} vs {summary['baseline']}, right = better)"
    return hbar_chart(title, bars, refs=refs), note


def _metric_table(summary: dict[str, Any], challenger: str, metrics: list[str]) -> str:
    baseline = summary["baseline"]
    cells = ("metric", baseline, challenger, "delta", "95% CI")
    rows = ["<tr>" + "".join(f"<th>{escape(c)}</th>" for c in cells) + "</tr>"]
    for metric in metrics:
        stats = _delta(summary, challenger, metric)
        ci = (
            f"[{stats['ci_low']:+.4f}, {stats['ci_high']:+.4f}]" if stats.get("ci_low") is not None else "n/a"
        )
        delta = f"{stats['delta']:+.4f}" if isinstance(stats.get("delta"), (int, float)) else "n/a"
        base, cand = _value(summary, baseline, metric), _value(summary, challenger, metric)
        rows.append(
            f"<tr><td>{escape(metric)}</td><td>{_num(base)}</td><td>{_num(cand)}</td><td>{delta}</td><td>{ci}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def render_html(
    summary: dict[str, Any],
    decision: Decision,
    policy: DecisionPolicy | None,
    title: str,
    usage: dict[str, Any] | None = None,
) -> str:
    """The full HTML page."""
    challenger, metrics = decision.challenger, chart_metrics(summary, policy)
    color, label = _OUTCOME_STYLE.get(decision.outcome, ("#ef6c00", "INCONCLUSIVE"))
    checks = "".join(
        f'<li class="{c.status}"><b>{escape(c.status)}</b> {escape(c.detail)}</li>'
        for c in sorted(decision.checks, key=lambda c: {"fail": 0, "unknown": 1}.get(c.status, 2))
    )
    slice_svg, slice_note = slice_chart(summary, challenger, policy)
    models = summary.get("models") or {}
    model_list = "".join(
        f"<li>{escape(n)}: <code>{escape(str((m or {}).get('uri')))}</code></li>" for n, m in models.items()
    )
    data = summary.get("data") or {}
    many = len(decision.candidates) > 1
    why_of = f" ({escape(challenger)})" if many else ""
    board = (
        f"<h2>Leaderboard</h2><p class='muted'>{leaderboard.leaderboard_note(decision)}</p>"
        f"{leaderboard.leaderboard_table(summary, decision)}"
        f"<div id='leaderboard-chart'>{leaderboard.leaderboard_chart(decision)}</div>"
        f"<h2>Details: {escape(challenger)}</h2>"
        if many
        else ""
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_CSS}{leaderboard.CSS if many else ''}</style></head><body><h1>{escape(title)}</h1>"
        f'<div class="banner" id="decision" style="background:{color}">Decision: <b>{label}</b> '
        f"({_headline(decision)}, primary metric {escape(decision.primary_metric)})</div>"
        f"{board}<h2>Why{why_of}</h2><ul id='reasons'>{checks}</ul>"
        f"<h2>Headline metrics</h2>{_metric_table(summary, challenger, metrics)}"
        f"<h2>Metrics, {escape(decision.baseline)} vs {escape(challenger)}</h2>"
        f"<p class='muted'>Axes are zoomed to the values; the whisker is the challenger's 95% bootstrap CI "
        f"(resampling unit: {escape(str((summary.get('bootstrap') or {}).get('unit', 'n/a')))}).</p>"
        f"<div class='grid' id='metric-charts'>{''.join(metric_charts(summary, challenger, metrics))}</div>"
        f"<h2>Improvement per metric</h2>"
        f"<div id='lift-chart'>{lift_chart(summary, challenger, metrics, policy)}</div>"
        f"<h2>Per-slice deltas</h2><p class='muted'>{escape(slice_note)}</p>"
        f"<div id='slice-chart'>{slice_svg}</div>"
        f"<h2>Inputs</h2><ul><li>data: <code>{escape(str(data.get('uri')))}</code>, "
        f"{data.get('rows')} rows</li>"
        f"{model_list}<li>artifact: <code>{escape(str(summary.get('artifact_uri')))}</code></li></ul>"
        f"{usage_html(usage)}"
        f"<p class='muted'>Generated {datetime.now(timezone.utc).isoformat(timespec='seconds')} "
        f"by airflow-ray-provider.</p></body></html>"
    )


def usage_html(usage: dict[str, Any] | None) -> str:
    """The "Run usage" section: the evaluation job's reserved and allocated CPU, utilisation, cost."""
    if not usage:
        return ""
    share = (usage.get("utilisation") or {}).get("allocated_cpu")
    cost = usage.get("cost")
    cells = [
        ("reserved", f"{_hours(usage.get('reserved_cpu_h'))} CPU-h"),
        ("allocated", f"{_hours(usage.get('allocated_cpu_h'))} CPU-h"),
        ("allocated utilisation", "n/a" if share is None else f"{share:.0%}"),
        ("cost", "n/a (no prices)" if not cost else f"{cost['amount']:.4f} {escape(str(cost['currency']))}"),
    ]
    rows = "".join(f"<tr><td>{name}</td><td class='num'>{value}</td></tr>" for name, value in cells)
    mode, line = escape(str(usage.get("mode"))), escape(str(usage.get("line")))
    return (
        f"<h2>Run usage</h2><p class='muted'>The evaluation job's usage record ({mode} mode): {line}</p>"
        f"<table id='usage'>{rows}</table>"
    )


def _hours(value: Any) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.4g}"


def _headline(decision: Decision) -> str:
    """``challenger vs champion``, or for many challengers the winner (or none) among how many."""
    if len(decision.candidates) <= 1:
        return f"{escape(decision.challenger)} vs {escape(decision.baseline)}"
    who = f"winner {escape(decision.winner)}" if decision.winner else "no winner"
    return f"{who} of {len(decision.candidates)} challengers vs {escape(decision.baseline)}"


def _markdown_board(decision: Decision, limit: int = 10) -> list[str]:
    if len(decision.candidates) <= 1:
        return []
    lines = [
        "",
        f"Leaderboard ({len(decision.candidates)} challengers, {decision.correction} correction):",
        "",
        "| # | model | lift | adjusted p | outcome |",
        "| ---: | --- | ---: | ---: | --- |",
    ]
    for rank, cand in enumerate(decision.candidates[:limit], 1):
        lift = "n/a" if cand.lift is None else f"{cand.lift:+.4f}"
        p = "n/a" if cand.p_adjusted is None else f"{cand.p_adjusted:.2g}"
        mark = " (winner)" if cand.name == decision.winner else ""
        lines.append(
            f"| {rank} | {cand.name}{mark} | {lift} | {p} | {leaderboard.outcome_label(cand, decision)} |"
        )
    if len(decision.candidates) > limit:
        lines.append(f"| | ... {len(decision.candidates) - limit} more in the HTML report | | | |")
    return lines


def render_markdown(
    summary: dict[str, Any],
    decision: Decision,
    policy: DecisionPolicy | None,
    report_uri: str,
    usage: dict[str, Any] | None = None,
) -> str:
    """A short markdown summary for the task log."""
    challenger, baseline = decision.challenger, decision.baseline
    lines = [
        f"## Decision: **{decision.outcome}** ({_headline(decision)})",
        "",
        f"| metric | {baseline} | {challenger} | delta | 95% CI |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for metric in chart_metrics(summary, policy)[:8]:
        stats = _delta(summary, challenger, metric)
        ci = (
            f"[{stats['ci_low']:+.4f}, {stats['ci_high']:+.4f}]" if stats.get("ci_low") is not None else "n/a"
        )
        delta = f"{stats['delta']:+.4f}" if isinstance(stats.get("delta"), (int, float)) else "n/a"
        base, cand = _num(_value(summary, baseline, metric)), _num(_value(summary, challenger, metric))
        lines.append(f"| {metric} | {base} | {cand} | {delta} | {ci} |")
    lines += _markdown_board(decision)
    lines += ["", "Reasons:", *(f"- {reason}" for reason in decision.reasons)]
    if usage:
        lines += ["", f"Run usage (evaluation job): {usage.get('line')}"]
    lines += ["", f"Report: {report_uri}"]
    return "\n".join(lines)


def build_report(
    summary: dict[str, Any],
    decision: Decision,
    *,
    policy: DecisionPolicy | None = None,
    title: str | None = None,
    usage: dict[str, Any] | None = None,
) -> Report:
    """Render the HTML report and the markdown summary (no I/O).

    :param usage: the evaluation job's usage summary (``templates.collect.usage_summary``), if any.
    """
    title = title or f"Champion vs challenger: {decision.outcome}"
    report_uri = f"{str(summary.get('artifact_uri', '')).rstrip('/')}/{REPORT_HTML}"
    return Report(
        render_html(summary, decision, policy, title, usage),
        render_markdown(summary, decision, policy, report_uri, usage),
    )


def write_report(artifact_uri: str, report: Report) -> dict[str, str]:
    """Write ``report.html`` and ``report.md`` beside the artifact (atomic writes via ``pyarrow.fs``)."""
    from airflow_ray_provider.workloads.common import artifacts

    html_uri, md_uri = artifacts.join(artifact_uri, REPORT_HTML), artifacts.join(artifact_uri, REPORT_MD)
    artifacts.write_bytes_atomic(html_uri, report.html.encode())
    artifacts.write_bytes_atomic(md_uri, report.markdown.encode())
    return {"html": html_uri, "markdown": md_uri}

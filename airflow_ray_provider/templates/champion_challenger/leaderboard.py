"""The report's leaderboard: every challenger in one table and one chart, readable with 50 models.

One row per challenger, best on the primary metric first: its value and its lift over the champion
with the bootstrap CI, the one-sided p-value before and after the multiple-comparison correction,
whether that is significant, the status of every check of the policy, and the outcome. The winner's row
is marked. The chart is the primary lift of every challenger with its CI, one bar each (a forest plot).
"""

from __future__ import annotations

from html import escape
from typing import Any

from airflow_ray_provider.templates.champion_challenger.decision import PROMOTE, Candidate, Decision
from airflow_ray_provider.templates.champion_challenger.svg import BAD, GOOD, NEUTRAL, HBar, hbar_chart

CSS = """
.board{max-height:640px;overflow:auto;border:1px solid #ddd}.board table{width:100%;font-size:12px}
.board td,.board th{white-space:nowrap;padding:3px 6px}
.board th{position:sticky;top:0;z-index:1}.board tr:nth-child(even) td{background:#fafafa}
.board tr.winner td{background:#e8f5e9;font-weight:600}.board td.model{font-family:monospace;text-align:left}
"""
_MARK = {"pass": "&#10003; pass", "fail": "&#10007; fail", "unknown": "? unknown"}
_CORRECTION = {"holm": "Holm-Bonferroni", "bonferroni": "Bonferroni", "none": "no correction"}


def rules_of(decision: Decision) -> list[str]:
    """Every rule any candidate was checked by, in the policy's order."""
    return list(dict.fromkeys(c.rule for cand in decision.candidates for c in cand.checks))


def _fmt(value: float | None, spec: str = "+.4f") -> str:
    return "n/a" if value is None else format(value, spec)


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}"


def _row(rank: int, cand: Candidate, summary: dict[str, Any], decision: Decision, rules: list[str]) -> str:
    metric = decision.primary_metric
    value = ((summary.get("metrics") or {}).get(cand.name) or {}).get(metric)
    primary = next((c for c in cand.checks if c.rule == f"primary:{metric}"), None)
    observed = primary.observed if primary else {}
    ci = (
        f"[{observed['ci_low']:+.4f}, {observed['ci_high']:+.4f}]"
        if isinstance(observed.get("ci_low"), float) and isinstance(observed.get("ci_high"), float)
        else "n/a"
    )
    checks = "".join(
        f'<td class="{cand.status_of(rule) or "muted"}">{_MARK.get(cand.status_of(rule) or "", "-")}</td>'
        for rule in rules
    )
    winner = cand.name == decision.winner
    return (
        f'<tr class="{"winner" if winner else ""}" data-model="{escape(cand.name)}"><td>{rank}</td>'
        f'<td class="model">{escape(cand.name)}{" (winner)" if winner else ""}</td>'
        f"<td>{_fmt(value if isinstance(value, (int, float)) else None, '.4f')}</td>"
        f"<td>{_fmt(cand.lift)}</td><td>{ci}</td><td>{_p(cand.p_value)}</td><td>{_p(cand.p_adjusted)}</td>"
        f'<td class="{"pass" if cand.significant else "unknown"}">{"yes" if cand.significant else "no"}</td>'
        f"{checks}<td class='{_status(cand.outcome)}'>{escape(outcome_label(cand, decision))}</td></tr>"
    )


def outcome_label(cand: Candidate, decision: Decision) -> str:
    """``promote`` for the winner, ``eligible`` for another that passes every check, else its outcome."""
    if cand.outcome == PROMOTE:
        return PROMOTE if cand.name == decision.winner else "eligible (not the best)"
    return cand.outcome


def _status(outcome: str) -> str:
    return {"promote": "pass", "keep_champion": "fail"}.get(outcome, "unknown")


def leaderboard_table(summary: dict[str, Any], decision: Decision) -> str:
    """The leaderboard as an HTML table in a scrolling box with a sticky header."""
    metric, rules = decision.primary_metric, rules_of(decision)
    base = ((summary.get("metrics") or {}).get(decision.baseline) or {}).get(metric)
    head = [
        "#",
        "model",
        f"{metric} ({decision.baseline} {_fmt(base, '.4f')})",
        "lift",
        "CI",
        "p",
        "adjusted p",
        "significant",
        *rules,
        "outcome",
    ]
    rows = [_row(rank, cand, summary, decision, rules) for rank, cand in enumerate(decision.candidates, 1)]
    header = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
    return f"<div class='board' id='leaderboard'><table>{header}{''.join(rows)}</table></div>"


def leaderboard_note(decision: Decision) -> str:
    """What the significance column means (correction, family size, level)."""
    correction = _CORRECTION.get(decision.correction, decision.correction)
    family = sum(1 for c in decision.candidates if c.p_value is not None)
    alpha = f"{decision.alpha:g}" if decision.alpha is not None else "n/a"
    return (
        f"{len(decision.candidates)} challengers, best {decision.primary_metric} lift first. p: one-sided "
        f"bootstrap p-value that the challenger is no better than {decision.baseline}; adjusted p: "
        f"{correction} over {family} challengers; significant: adjusted p &lt;= {alpha}. At most one "
        f"challenger is promoted: the best on {decision.primary_metric} among those passing every check."
    )


def leaderboard_chart(decision: Decision) -> str:
    """Primary lift of every challenger with its CI (green: significant, red: CI below zero)."""
    rows = []
    for cand in decision.candidates:
        if cand.lift is None:
            continue
        primary = next((c for c in cand.checks if c.rule.startswith("primary:")), None)
        low, high = (primary.observed.get(k) if primary else None for k in ("ci_low", "ci_high"))
        color = GOOD if cand.significant else BAD if isinstance(high, float) and high < 0 else NEUTRAL
        label = f"{cand.name} *" if cand.name == decision.winner else cand.name
        rows.append(HBar(label[:24], cand.lift, low, high, color))
    title = f"{decision.primary_metric} lift over {decision.baseline} per challenger (95% CI; * winner)"
    return hbar_chart(title, rows, label_w=190)

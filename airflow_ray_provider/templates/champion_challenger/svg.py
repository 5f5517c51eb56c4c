"""Tiny inline-SVG chart builders for the HTML report (no JavaScript, no CDN, no plotting library).

Every chart is a standalone ``<svg>`` string whose bars are ``<rect class="bar">`` elements with their
value in ``data-value``, so a headless browser (or a test) can check that the charts rendered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

GOOD, BAD, NEUTRAL, CHAMPION, CHALLENGER = "#2e7d32", "#c62828", "#9e9e9e", "#607d8b", "#1e88e5"
_FONT = 'font-family="system-ui, sans-serif"'


@dataclass(frozen=True)
class HBar:
    """One row of a horizontal bar chart: a value, an optional interval and a colour."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None
    color: str = NEUTRAL


def _fmt(value: float) -> str:
    return f"{value:+.4f}" if abs(value) < 10 else f"{value:+.1f}"


def _ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    step = 10 ** math.floor(math.log10((hi - lo) / count))
    for mult in (1, 2, 5, 10):
        if (hi - lo) / (step * mult) <= count + 1:
            step *= mult
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _text(x: float, y: float, text: str, *, size: int = 10, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" {_FONT} {extra}>'
        f"{escape(text)}</text>"
    )


def _bar(x: float, y: float, w: float, h: float, value: float, label: str, color: str) -> str:
    return (
        f'<rect class="bar" data-value="{value:.6g}" x="{x:.1f}" y="{y:.1f}" width="{max(w, 1.0):.1f}" '
        f'height="{max(h, 1.0):.1f}" fill="{color}"><title>{escape(label)}: {value:.6g}</title></rect>'
    )


def _whisker(a: tuple[float, float], b: tuple[float, float], cap: float = 6) -> str:
    """An interval from ``a`` to ``b`` (x, y points) with caps perpendicular to it."""
    (x1, y1), (x2, y2) = a, b
    vertical = x1 == x2
    caps = [(x - cap, y, x + cap, y) if vertical else (x, y - cap, x, y + cap) for x, y in (a, b)]
    lines = [(x1, y1, x2, y2), *caps]
    body = "".join(f'<line x1="{p:.1f}" y1="{q:.1f}" x2="{r:.1f}" y2="{t:.1f}"/>' for p, q, r, t in lines)
    return f'<g class="ci" stroke="#212121" stroke-width="1.4">{body}</g>'


def pair_chart(
    title: str, names: tuple[str, str], values: tuple[float, float], interval: tuple[float, float] | None
) -> str:
    """A vertical two-bar chart (champion vs challenger) with the challenger's confidence interval.

    The y axis is zoomed to the values (metrics such as AUC differ in the third decimal), and says so.

    :param interval: ``(low, high)`` of the challenger's value implied by the delta's bootstrap CI.
    """
    width, height, left, top, bottom = 220, 190, 46, 28, 34
    points = [*values, *(interval or ())]
    lo, hi = min(points), max(points)
    pad = (hi - lo) * 0.25 or abs(hi) * 0.05 or 0.05
    lo, hi = lo - pad, hi + pad
    if min(points) >= 0 > lo:
        lo = 0.0
    plot_h = height - top - bottom

    def y(v: float) -> float:
        return top + plot_h * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg class="chart pair" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        _text(width / 2, 16, title, size=13, anchor="middle", extra='font-weight="600"'),
    ]
    for tick in _ticks(lo, hi):
        parts.append(
            f'<line x1="{left}" x2="{width - 8}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e0e0e0"/>'
            + _text(left - 4, y(tick) + 4, f"{tick:.4g}", anchor="end")
        )
    bar_w = 52
    for i, (name, value, color) in enumerate(zip(names, values, (CHAMPION, CHALLENGER), strict=True)):
        x = left + 20 + i * (bar_w + 30)
        top_y, base_y = y(value), y(lo)
        parts.append(
            _bar(x, top_y, bar_w, base_y - top_y, value, name, color)
            + _text(x + bar_w / 2, height - bottom + 14, name, size=11, anchor="middle")
            + _text(x + bar_w / 2, height - 4, f"{value:.4f}", anchor="middle")
        )
        if i == 1 and interval is not None:
            cx = x + bar_w / 2
            parts.append(_whisker((cx, y(interval[0])), (cx, y(interval[1])), cap=8))
    parts.append("</svg>")
    return "".join(parts)


#: Average advance of a character of the labels' font (11 px system-ui) in pixels, rounded up: an SVG
#: cannot size a column to its text, so the label column is sized from the longest label's length.
_LABEL_CHAR_PX = 6.6


def hbar_chart(
    title: str, rows: list[HBar], *, refs: tuple[tuple[float, str], ...] = (), label_w: int = 150
) -> str:
    """A horizontal bar chart of signed values around zero, with optional intervals and reference lines.

    :param refs: ``(x, label)`` vertical reference lines (e.g. the minimum lift, the regression limit).
    :param label_w: the least width of the label column; a longer label widens it (and the chart).
    """
    row_h, top, right, plot_w = 22, 30, 70, 420
    longest = max((len(row.label) for row in rows), default=0)
    label_w = max(label_w, math.ceil(longest * _LABEL_CHAR_PX) + 14)
    width = label_w + plot_w + right
    height = top + row_h * max(len(rows), 1) + 26
    points = [0.0, *(r.value for r in rows), *(r.low for r in rows if r.low is not None)]
    points += [r.high for r in rows if r.high is not None] + [x for x, _ in refs]
    lo, hi = min(points), max(points)
    pad = (hi - lo) * 0.08 or 0.01
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return label_w + plot_w * (v - lo) / (hi - lo)

    parts = [
        f'<svg class="chart hbar" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        _text(8, 16, title, size=13, extra='font-weight="600"'),
    ]
    for i, row in enumerate(rows):
        cy = top + i * row_h
        x0, x1 = sorted((x(0.0), x(row.value)))
        parts.append(
            _text(label_w - 6, cy + 14, row.label, size=11, anchor="end")
            + _bar(x0, cy + 4, x1 - x0, row_h - 8, row.value, row.label, row.color)
            + _text(width - right + 6, cy + 14, _fmt(row.value))
        )
        if row.low is not None and row.high is not None:
            mid = cy + row_h / 2
            parts.append(_whisker((x(row.low), mid), (x(row.high), mid), cap=5))
    bottom = height - 22
    parts.append(f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="{top - 4}" y2="{bottom}" stroke="#424242"/>')
    for ref_x, ref_label in refs:
        parts.append(
            f'<line class="ref" x1="{x(ref_x):.1f}" x2="{x(ref_x):.1f}" y1="{top - 4}" y2="{bottom}" '
            f'stroke="#ef6c00" stroke-dasharray="4 3"/>'
            + _text(x(ref_x), height - 8, ref_label, anchor="middle", extra='fill="#ef6c00"')
        )
    parts.append("</svg>")
    return "".join(parts)

"""Small inline-SVG charts for the HTML report (pure: data in, markup out; no JavaScript).

Each function returns one ``<svg>`` element as a string; every text it holds is escaped. A chart
with no data returns a ``<p class="empty">`` note instead, so a figure is either drawn or says
why not. Lines of a series share its colour (and a dash pattern beyond the palette's length),
and the legend below each chart names them in the same order.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
DASHES = ("", "6 3", "2 3", "8 3 2 3")
W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 46

Series = tuple[str, Sequence[float], Sequence[float]]  # (name, xs, ys)


def style(i: int) -> tuple[str, str]:
    """(colour, dash pattern) of the i-th series."""
    return PALETTE[i % len(PALETTE)], DASHES[(i // len(PALETTE)) % len(DASHES)]


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def _frame(title: str, x_label: str, y_label: str) -> list[str]:
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}"'
        f' role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect class="plot-bg" x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}"'
        ' fill="#fff" stroke="#999"/>',
        f'<text class="axis-label" x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text class="axis-label" x="14" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle"'
        f' transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2})">{escape(y_label)}</text>',
    ]


def _axes(out: list[str], xticks, yticks, sx, sy, x_text=_fmt, y_text=_fmt) -> None:
    for v in yticks:
        y = sy(v)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        )
        out.append(
            f'<text class="tick" x="{LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">{escape(y_text(v))}</text>'
        )
    for v in xticks:
        x = sx(v)
        out.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#e5e5e5"/>'
        )
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{escape(x_text(v))}</text>'
        )


def legend(names: Sequence[str]) -> str:
    items = []
    for i, name in enumerate(names):
        colour, dash = style(i)
        items.append(
            f'<span class="key"><svg width="26" height="10" aria-hidden="true"><line x1="0" x2="26" y1="5" y2="5"'
            f' stroke="{colour}" stroke-width="3" stroke-dasharray="{dash}"/></svg>{escape(name)}</span>'
        )
    return '<div class="legend">' + "".join(items) + "</div>"


def line_chart(
    title: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    log_x: bool = False,
    step: bool = False,
    y_max: float | None = None,
    y_percent: bool = False,
) -> str:
    """One line per series; ``log_x``: logarithmic x axis (values ≤ 0 are left out); ``step``:
    a step line (value holds until the next point)."""
    pts = [(n, [(x, y) for x, y in zip(xs, ys) if not log_x or x > 0]) for n, xs, ys in series]
    every = [p for _, ps in pts for p in ps]
    if not every:
        return f'<p class="empty">{escape(title)}: no data to draw.</p>'
    x_lo, x_hi = min(x for x, _ in every), max(x for x, _ in every)
    y_hi = y_max if y_max is not None else max(y for _, y in every)
    y_hi = y_hi if y_hi > 0 else 1.0
    if log_x:
        lo_e, hi_e = math.floor(math.log10(x_lo)), math.ceil(math.log10(x_hi))
        hi_e = hi_e if hi_e > lo_e else lo_e + 1
        x_lo, x_hi = 10.0**lo_e, 10.0**hi_e
        xticks = [10.0**e for e in range(lo_e, hi_e + 1)]

        def fx(v: float) -> float:
            return (math.log10(v) - lo_e) / (hi_e - lo_e)
    else:
        x_hi = x_hi if x_hi > x_lo else x_lo + 1.0
        xticks = _nice_ticks(x_lo, x_hi)

        def fx(v: float) -> float:
            return (v - x_lo) / (x_hi - x_lo)

    def sx(v: float) -> float:
        return LEFT + fx(v) * (W - LEFT - RIGHT)

    def sy(v: float) -> float:
        return H - BOTTOM - (v / y_hi) * (H - TOP - BOTTOM)

    out = _frame(title, x_label, y_label)
    yticks = [t for t in _nice_ticks(0.0, y_hi) if t <= y_hi * 1.0001]
    _axes(
        out,
        [t for t in xticks if x_lo <= t <= x_hi * 1.0001],
        yticks,
        sx,
        sy,
        y_text=(lambda v: f"{v:.0%}") if y_percent else _fmt,
    )
    for i, (name, ps) in enumerate(pts):
        if not ps:
            continue
        colour, dash = style(i)
        coords = []
        for k, (x, y) in enumerate(ps):
            if step and k:
                coords.append(f"{sx(x):.1f},{sy(ps[k - 1][1]):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
        if len(coords) == 1:
            coords.append(coords[0])
        out.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{colour}"'
            f' stroke-width="1.8" stroke-dasharray="{dash}" points="{" ".join(coords)}"/>'
        )
    out.append("</svg>")
    return "\n".join(out) + legend([n for n, _ in pts])


def bar_chart(
    title: str,
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    y_label: str,
) -> str:
    """Grouped bars: for each group (x position) one bar per series; ``None`` draws no bar."""
    vals = [v for _, vs in series for v in vs if v is not None]
    if not groups or not vals:
        return f'<p class="empty">{escape(title)}: no data to draw.</p>'
    y_hi = max(vals) or 1.0
    out = _frame(title, "", y_label)
    inner = W - LEFT - RIGHT
    gw = inner / len(groups)
    bw = gw * 0.8 / max(1, len(series))

    def sy(v: float) -> float:
        return H - BOTTOM - (v / y_hi) * (H - TOP - BOTTOM)

    for v in [t for t in _nice_ticks(0.0, y_hi) if t <= y_hi * 1.0001]:
        y = sy(v)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        )
        out.append(
            f'<text class="tick" x="{LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">{escape(_fmt(v))}</text>'
        )
    for g, label in enumerate(groups):
        x0 = LEFT + g * gw + gw * 0.1
        out.append(
            f'<text class="tick" x="{LEFT + (g + 0.5) * gw:.1f}" y="{H - BOTTOM + 16}"'
            f' text-anchor="middle">{escape(label)}</text>'
        )
        for i, (name, vs) in enumerate(series):
            v = vs[g] if g < len(vs) else None
            if v is None:
                continue
            colour, _ = style(i)
            y = sy(v)
            out.append(
                f'<rect class="bar" data-series="{escape(name)}" x="{x0 + i * bw:.1f}" y="{y:.1f}"'
                f' width="{max(bw - 1, 1):.1f}" height="{H - BOTTOM - y:.1f}" fill="{colour}">'
                f"<title>{escape(name)} {escape(label)}: {escape(_fmt(v))}</title></rect>"
            )
    out.append("</svg>")
    return "\n".join(out) + legend([n for n, _ in series])

"""SVG charts of the report, drawn in Python: no script is needed to see them.

Every label that comes from the workspace (model, cluster and stage names) goes through
``esc``: the charts are markup built from data, so the data is escaped, never trusted.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _open(width: float, height: float, label: str, cls: str = "chart") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(label)}">')


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out: list[float] = []
    v = start
    while v <= hi + 1e-9 and len(out) < 50:
        out.append(round(v, 10))
        v += step
    return out


def ci_plot(rows: Sequence[tuple[str, float, float | None, float | None]], width: int = 680,
            label: str = "ratings with 95% confidence intervals") -> str:
    """Return an SVG of each row's value (dot) and interval (bar), in the given order.

    ``rows``: (name, value, low, high); a missing bound draws the dot alone.
    """
    if not rows:
        return ""
    lows = [lo if lo is not None else v for _, v, lo, _ in rows]
    highs = [hi if hi is not None else v for _, v, _, hi in rows]
    lo, hi = min(lows), max(highs)
    pad = max((hi - lo) * 0.08, 1.0)
    lo, hi = lo - pad, hi + pad
    label_w, row_h = 230, 24
    plot_w = width - label_w - 20
    height = row_h * len(rows) + 34

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    parts = [_open(width, height, label)]
    axis_y = height - 22
    for t in _nice_ticks(lo, hi, 6):
        parts.append(f'<line class="grid" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="4" y2="{axis_y}"/>'
                     f'<text x="{x(t):.1f}" y="{height - 6}" text-anchor="middle">{t:g}</text>')
    for i, ((name, v, _, _), a, b) in enumerate(zip(rows, lows, highs)):
        y = 15 + i * row_h
        short = name if len(name) <= 32 else name[:31] + "\u2026"
        parts.append(f'<text x="{label_w - 8}" y="{y + 4}" text-anchor="end">{esc(short)}'
                     f'<title>{esc(name)}</title></text>')
        parts.append(f'<line class="ci" x1="{x(a):.1f}" x2="{x(b):.1f}" y1="{y}" y2="{y}" stroke="#7aa6d6" '
                     f'stroke-width="6"><title>{esc(name)}: {a:.1f} .. {b:.1f}</title></line>')
        parts.append(f'<circle cx="{x(v):.1f}" cy="{y}" r="4.5" fill="#1f4e85">'
                     f'<title>{esc(name)}: {v:.1f}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _heat_colour(value: float | None, kind: str) -> str:
    if value is None or not math.isfinite(value):
        return "#f3f4f6"
    if kind == "count":
        return f"rgba(60,120,90,{0.08 + 0.75 * max(0.0, min(1.0, value)):.2f})"
    d = max(-1.0, min(1.0, (value - 0.5) * 2))
    if d >= 0:
        return f"rgba(31,78,133,{0.08 + 0.72 * d:.2f})"
    return f"rgba(178,34,34,{0.08 + 0.72 * -d:.2f})"


def heatmap(models: Sequence[str], values: Sequence[Sequence[float | None]], *, kind: str = "share",
            label: str, fmt: str = "pct") -> str:
    """Return an SVG heatmap, row against column; ``kind`` ``share`` (0..1, blue above half) or ``count``."""
    n = len(models)
    if n == 0:
        return ""
    cell = 46 if n <= 12 else max(22, 560 // n)
    label_w = 190
    top = 26
    width, height = label_w + cell * n + 10, top + cell * n + 10
    top_max = max((v for row in values for v in row if v is not None and math.isfinite(v)), default=1) or 1
    parts = [_open(width, height, label, "chart heatmap")]
    small = cell < 34
    for j, m in enumerate(models):
        parts.append(f'<text x="{label_w + j * cell + cell / 2:.1f}" y="{top - 8}" text-anchor="middle">#{j + 1}'
                     f'<title>{esc(m)}</title></text>')
    for i, a in enumerate(models):
        y = top + i * cell
        parts.append(f'<text x="{label_w - 8}" y="{y + cell / 2 + 4:.1f}" text-anchor="end">#{i + 1} {esc(a[:24])}'
                     f'<title>{esc(a)}</title></text>')
        for j, b in enumerate(models):
            v = values[i][j]
            x0 = label_w + j * cell
            if i == j:
                parts.append(f'<rect x="{x0}" y="{y}" width="{cell - 2}" height="{cell - 2}" fill="#e5e7eb"/>')
                continue
            shade = v / top_max if (kind == "count" and v is not None) else v
            if v is None or (isinstance(v, float) and not math.isfinite(v)):
                text = "-"
            elif fmt == "pct":
                text = f"{100 * v:.0f}"
            else:
                text = f"{v:.0f}"
            parts.append(f'<rect x="{x0}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                         f'fill="{_heat_colour(shade, kind)}"><title>{esc(a)} vs {esc(b)}: {text}'
                         f'{"%" if fmt == "pct" and text != "-" else ""}</title></rect>')
            if not small or fmt != "pct":
                parts.append(f'<text x="{x0 + (cell - 2) / 2:.1f}" y="{y + cell / 2 + 3:.1f}" text-anchor="middle"'
                             f' class="cellv">{text}</text>')
    parts.append("</svg>")
    return "".join(parts)


def scatter(points: Sequence[tuple[float, float, int, bool, str]], names: Sequence[str], *, width: int = 620,
            height: int = 460, label: str = "cluster map") -> str:
    """Return an SVG scatter: (x, y, colour index, highlighted, tooltip) per point; a legend of ``names``."""
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    pad = 12
    legend_w = 170
    plot_w, plot_h = width - legend_w - 2 * pad, height - 2 * pad

    def sx(v: float) -> float:
        return pad + (v - x0) / ((x1 - x0) or 1) * plot_w

    def sy(v: float) -> float:
        return pad + (1 - (v - y0) / ((y1 - y0) or 1)) * plot_h

    parts = [_open(width, height, label, "chart scatter"),
             f'<rect x="1" y="1" width="{plot_w + 2 * pad - 2}" height="{height - 2}" fill="none" stroke="#d7dde3"/>']
    # the unselected first (faint), the selected on top
    for x, y, c, sel, tip in sorted(points, key=lambda p: p[3]):
        colour = PALETTE[c % len(PALETTE)]
        attrs = f'fill="{colour}" fill-opacity="0.9" stroke="#111" stroke-width="0.6"' if sel else \
            f'fill="{colour}" fill-opacity="0.3"'
        title = f"<title>{esc(tip)}</title>" if tip else ""
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{3.4 if sel else 2.4}" {attrs}>{title}</circle>')
    lx = plot_w + 2 * pad + 12
    for i, name in enumerate(names[:24]):
        ly = 18 + i * 18
        parts.append(f'<circle cx="{lx}" cy="{ly - 4}" r="5" fill="{PALETTE[i % len(PALETTE)]}"/>'
                     f'<text x="{lx + 10}" y="{ly}">{esc(name[:20])}</text>')
    if len(names) > 24:
        parts.append(f'<text x="{lx}" y="{18 + 24 * 18}">+{len(names) - 24} more</text>')
    parts.append("</svg>")
    return "".join(parts)


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], *, width: int = 680, height: int = 260,
               x_label: str = "", y_label: str = "", label: str = "line chart") -> str:
    """Return an SVG of one polyline per (name, [(x, y), ...]) series, with a legend."""
    pts = [p for _, s in series for p in s if math.isfinite(p[0]) and math.isfinite(p[1])]
    if not pts:
        return ""
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y1 == y0:
        y0, y1 = y0 - 1, y1 + 1
    left, right, top, bottom = 56, 180, 10, 34
    pw, ph = width - left - right, height - top - bottom

    def sx(v: float) -> float:
        return left + (v - x0) / ((x1 - x0) or 1) * pw

    def sy(v: float) -> float:
        return top + (1 - (v - y0) / (y1 - y0)) * ph

    parts = [_open(width, height, label)]
    for t in _nice_ticks(y0, y1, 4):
        parts.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>'
                     f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in _nice_ticks(x0, x1, 6):
        parts.append(f'<text x="{sx(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{t:g}</text>')
    if x_label:
        parts.append(f'<text x="{left + pw / 2:.1f}" y="{height - 2}" text-anchor="middle">{esc(x_label)}</text>')
    if y_label:
        parts.append(f'<text x="12" y="{top + ph / 2:.1f}" transform="rotate(-90 12 {top + ph / 2:.1f})" '
                     f'text-anchor="middle">{esc(y_label)}</text>')
    for k, (name, s) in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        good = [p for p in s if math.isfinite(p[0]) and math.isfinite(p[1])]
        if len(good) == 1:
            parts.append(f'<circle cx="{sx(good[0][0]):.1f}" cy="{sy(good[0][1]):.1f}" r="3" fill="{colour}"/>')
        elif good:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{path}">'
                         f'<title>{esc(name)}</title></polyline>')
        ly = top + 12 + k * 16
        if k < 14:
            parts.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 28}" y1="{ly - 4}" y2="{ly - 4}" '
                         f'stroke="{colour}" stroke-width="3"/>'
                         f'<text x="{left + pw + 32}" y="{ly}">{esc(name[:22])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bars(rows: Sequence[tuple[str, Sequence[tuple[str, float]]]], *, width: int = 680,
         label: str = "stacked bars") -> str:
    """Return horizontal stacked bars: (row name, [(segment name, value), ...]); a legend of segment names."""
    if not rows:
        return ""
    segs: list[str] = []
    for _, parts_ in rows:
        for name, _ in parts_:
            if name not in segs:
                segs.append(name)
    total_max = max((sum(v for _, v in p) for _, p in rows), default=0) or 1
    label_w, row_h, legend_h = 200, 22, 20 * ((len(segs) + 3) // 4)
    pw = width - label_w - 60
    height = row_h * len(rows) + legend_h + 10
    out = [_open(width, height, label)]
    for i, (name, parts_) in enumerate(rows):
        y = 4 + i * row_h
        out.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end">{esc(name[:30])}</text>')
        x = float(label_w)
        for seg, v in parts_:
            w = v / total_max * pw
            colour = PALETTE[segs.index(seg) % len(PALETTE)]
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0):.1f}" height="{row_h - 6}" fill="{colour}">'
                       f'<title>{esc(name)}: {esc(seg)} {v:g}</title></rect>')
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{sum(v for _, v in parts_):g}</text>')
    ly = 4 + len(rows) * row_h + 14
    for k, seg in enumerate(segs):
        lx = label_w + (k % 4) * 130
        yy = ly + (k // 4) * 20
        out.append(f'<rect x="{lx}" y="{yy - 9}" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>'
                   f'<text x="{lx + 14}" y="{yy}">{esc(seg[:16])}</text>')
    out.append("</svg>")
    return "".join(out)

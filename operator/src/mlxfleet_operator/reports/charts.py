"""Small inline SVG charts for the reports (no plotting library: weasyprint renders SVG).

Pure string building; every label is XML-escaped. Colours follow one palette so the PDF reads
as one document. May import: the standard library. Called by: monthly, weekly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from xml.sax.saxutils import escape

INK = "#1f2933"
MUTED = "#7b8794"
GRID = "#e4e7eb"
PRIMARY = "#2f6fde"
SECONDARY = "#f2a33a"
GAP = "#c9ced6"
FONT = "font-family='DejaVu Sans, sans-serif'"


def _nice_max(value: float, ticks: int = 4) -> float:
    """Smallest `ticks` x a round step (1, 2, 2.5, 5 x 10^k) that reaches `value`."""
    if value <= 0:
        return float(ticks)
    raw = value / ticks
    base = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0):
        if m * base >= raw:
            return m * base * ticks
    return 10.0 * base * ticks


def _svg(width: int, height: int) -> str:
    """The opening tag of a chart `width` x `height` pixels, in the reports' font."""
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {FONT} font-size='9'>"
    )


def _legend(left: int, entries: Sequence[tuple[str, str, int]]) -> str:
    """A legend on the chart's top line: per (label, colour, offset from `left`), a swatch and
    its label (a fixed text, not escaped)."""
    return "".join(
        f"<rect x='{left + dx}' y='2' width='8' height='8' fill='{colour}'/>"
        f"<text x='{left + dx + 11}' y='9' fill='{INK}'>{label}</text>"
        for label, colour, dx in entries
    )


def _fmt_tokens(v: float) -> str:
    if v >= 1e9:
        return f"{v / 1e9:.1f}B"
    if v >= 1e6:
        return f"{v / 1e6:.0f}M" if v >= 1e7 else f"{v / 1e6:.1f}M"
    if v >= 1e3:
        return f"{v / 1e3:.0f}k"
    return f"{v:.0f}"


def daily_bars(
    days: Sequence[date], values: Sequence[float | None], *, width: int = 680, height: int = 170
) -> str:
    """Tokens per day; a day without data is a hatched grey bar labelled as a gap."""
    left, bottom, top = 44, 22, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    vmax = _nice_max(max((v for v in values if v is not None), default=0.0))
    n = max(1, len(days))
    slot = plot_w / n
    bar_w = max(2.0, slot * 0.72)
    parts = [
        _svg(width, height),
        "<defs><pattern id='gap' width='4' height='4' patternUnits='userSpaceOnUse' "
        f"patternTransform='rotate(45)'><rect width='2' height='4' fill='{GAP}'/></pattern></defs>",
    ]
    for i in range(5):
        y = top + plot_h - plot_h * i / 4
        parts.append(
            f"<line x1='{left}' x2='{width - 8}' y1='{y:.1f}' y2='{y:.1f}' stroke='{GRID}'/>"
            f"<text x='{left - 5}' y='{y + 3:.1f}' text-anchor='end' fill='{MUTED}'>"
            f"{_fmt_tokens(vmax * i / 4)}</text>"
        )
    for i, (d, v) in enumerate(zip(days, values, strict=True)):
        x = left + i * slot + (slot - bar_w) / 2
        if v is None:
            parts.append(
                f"<rect x='{x:.1f}' y='{top}' width='{bar_w:.1f}' height='{plot_h}' "
                f"fill='url(#gap)'><title>{d.isoformat()}: no data</title></rect>"
            )
        else:
            h = plot_h * v / vmax
            parts.append(
                f"<rect x='{x:.1f}' y='{top + plot_h - h:.1f}' width='{bar_w:.1f}' "
                f"height='{h:.1f}' fill='{PRIMARY}' rx='1'/>"
            )
        if n <= 10 or d.day in (1, 8, 15, 22, 29) or i == n - 1:
            label = d.strftime("%a") if n <= 10 else f"{d.day}"
            parts.append(
                f"<text x='{x + bar_w / 2:.1f}' y='{height - 8}' text-anchor='middle' "
                f"fill='{MUTED}'>{label}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class PairBar:
    label: str
    ours: float | None
    reference: float | None


def cost_per_million_bars(rows: Sequence[PairBar], *, width: int = 330) -> str:
    """Per model: our cost per million tokens against the reference API price of the same mix."""
    row_h, left, right, top = 34, 92, 58, 16
    height = top + row_h * max(1, len(rows)) + 4
    vmax = _nice_max(max([r.ours or 0 for r in rows] + [r.reference or 0 for r in rows] + [0.01]))
    plot_w = width - left - right
    parts = [
        _svg(width, height),
        _legend(left, [("mlxfleet", PRIMARY, 0), ("reference API", SECONDARY, 60)]),
    ]
    for i, r in enumerate(rows):
        y = top + i * row_h
        parts.append(
            f"<text x='{left - 6}' y='{y + 16}' text-anchor='end' fill='{INK}'>"
            f"{escape(r.label[:18])}</text>"
        )
        for j, (value, colour) in enumerate(((r.ours, PRIMARY), (r.reference, SECONDARY))):
            by = y + 3 + j * 13
            if value is None:
                parts.append(f"<text x='{left + 2}' y='{by + 9}' fill='{MUTED}'>n/a</text>")
                continue
            w = max(1.0, plot_w * value / vmax)
            parts.append(
                f"<rect x='{left}' y='{by}' width='{w:.1f}' height='11' fill='{colour}' rx='1'/>"
                f"<text x='{left + w + 4:.1f}' y='{by + 9}' fill='{INK}'>${value:,.2f}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def split_bars(rows: Sequence[tuple[str, float, float]], *, width: int = 330) -> str:
    """Per node: utilised vs idle cost as one stacked bar each (USD)."""
    row_h, left, right, top = 24, 70, 54, 16
    height = top + row_h * max(1, len(rows)) + 2
    vmax = _nice_max(max([a + b for _, a, b in rows] + [0.01]))
    plot_w = width - left - right
    parts = [
        _svg(width, height),
        _legend(left, [("serving", PRIMARY, 0), ("idle capacity", GAP, 56)]),
    ]
    for i, (label, used, idle) in enumerate(rows):
        y = top + i * row_h
        wu, wi = plot_w * used / vmax, plot_w * idle / vmax
        parts.append(
            f"<text x='{left - 6}' y='{y + 12}' text-anchor='end' fill='{INK}'>"
            f"{escape(label[:14])}</text>"
            f"<rect x='{left}' y='{y + 3}' width='{wu:.1f}' height='13' fill='{PRIMARY}'/>"
            f"<rect x='{left + wu:.1f}' y='{y + 3}' width='{wi:.1f}' height='13' fill='{GAP}'/>"
            f"<text x='{left + wu + wi + 4:.1f}' y='{y + 13}' fill='{INK}'>"
            f"${used + idle:,.0f}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)

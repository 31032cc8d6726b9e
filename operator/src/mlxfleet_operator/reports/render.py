"""jinja2 rendering of the reports: Markdown and HTML for the weekly diff, HTML -> PDF (weasyprint)
for the monthly executive summary. Number formatting lives here as template filters.

May import: jinja2, weasyprint (lazily), reports. Called by: cli.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jinja2

from mlxfleet_operator.reports import monthly, weekly

GIB = 1024**3


def fmt_tokens(v: float | None) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 1e9:
        return f"{v / 1e9:.2f}B"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def fmt_value(v: float | None, kind: str) -> str:
    if v is None:
        return "n/a"
    match kind:
        case "tokens":
            return fmt_tokens(v)
        case "count":
            return f"{v:,.0f}"
        case "usd":
            return f"${v:,.2f}"
        case "usd_m":
            return f"${v:,.3f}"
        case "seconds":
            return f"{v:.2f} s"
        case "pct":
            return f"{v:.1%}"
        case "ratio":
            return f"{v:.1f}x"
        case "gib":
            return f"{v / GIB:.1f} GiB"
        case "celsius":
            return f"{v:.0f} °C"
        case "hours":
            return f"{v:.1f} h"
    return str(v)


def fmt_change(v: float | None) -> str:
    if v is None:
        return "n/a"
    if abs(v) < 0.0005:
        return "0.0%"
    return f"{v:+.1%}"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("mlxfleet_operator.reports", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters |= {"tokens": fmt_tokens, "value": fmt_value, "change": fmt_change}
    return env


def _generated() -> str:
    return f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"


def weekly_markdown(report: weekly.WeeklyReport, *, generated: str | None = None) -> str:
    return (
        environment()
        .get_template("weekly.md.j2")
        .render(r=report, generated=generated or _generated())
    )


def weekly_html(report: weekly.WeeklyReport, *, generated: str | None = None) -> str:
    return (
        environment()
        .get_template("weekly.html.j2")
        .render(r=report, generated=generated or _generated())
    )


def monthly_html(report: monthly.MonthlyReport, *, generated: str | None = None) -> str:
    return (
        environment()
        .get_template("monthly.html.j2")
        .render(r=report, generated=generated or _generated())
    )


def pdf(html: str) -> bytes:
    """HTML -> PDF with weasyprint (needs the pango system libraries)."""
    import weasyprint

    data: Any = weasyprint.HTML(string=html).write_pdf()
    return bytes(data)

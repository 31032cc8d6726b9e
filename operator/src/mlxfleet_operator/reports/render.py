"""jinja2 rendering of the reports: Markdown and HTML for the weekly diff, HTML -> PDF (weasyprint)
for the monthly executive summary. Number formatting lives here as template filters.

Everything rendered is escaped, whatever the template's name: model names, sources (an S3 key
may hold `<`, `>`, `'`), node and team names come from telemetry and specs that tenants write.
HTML templates autoescape every value; the `css_string` filter escapes a value for a CSS string
(the page footer); the Markdown template escapes every value for Markdown (`markdown_escape`:
HTML characters as entities, Markdown punctuation with a backslash, no autolinks). The PDF
renderer fetches nothing: the reports are self-contained (inline styles and SVG), so weasyprint's
URL fetcher allows only `data:` URLs and refuses every other scheme (http, https, file, ftp).

May import: jinja2, markupsafe, weasyprint (lazily), reports. Called by: cli.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import jinja2
import markupsafe

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


_CSS_SAFE = re.compile(r"[A-Za-z0-9 ,.:_/()+%-]")
_MD_PUNCT = re.compile(r"([\\`*_{}\[\]|~])")


def css_string(value: object) -> markupsafe.Markup:
    """`value` for the inside of a double-quoted CSS string in a `<style>` element: every
    character but letters, digits and plain punctuation as a CSS escape (so neither a quote
    nor `</style>` can end it), marked safe for the HTML around it."""
    text = str(value)
    return markupsafe.Markup(  # noqa: S704 (every character but plain ones is escaped)
        "".join(c if _CSS_SAFE.fullmatch(c) else f"\\{ord(c):x} " for c in text)
    )


def markdown_escape(value: object) -> str:
    """`value` as literal Markdown text in a table cell or a line: HTML characters as entities
    (no raw HTML), Markdown punctuation backslash-escaped (no links, images, code or table
    cells), line breaks as spaces, and `://` broken so no URL becomes an autolink."""
    if value is None:
        return ""
    text = str(value).replace("\r", " ").replace("\n", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", text).replace("://", "&#58;//")


def _filters(env: jinja2.Environment) -> jinja2.Environment:
    env.filters |= {
        "tokens": fmt_tokens,
        "value": fmt_value,
        "change": fmt_change,
        "css_string": css_string,
    }
    return env


def environment() -> jinja2.Environment:
    """The HTML reports' environment: every template autoescapes, whatever its name."""
    return _filters(
        jinja2.Environment(
            loader=jinja2.PackageLoader("mlxfleet_operator.reports", "templates"),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
            undefined=jinja2.StrictUndefined,
        )
    )


def markdown_environment() -> jinja2.Environment:
    """The Markdown report's environment: every `{{ value }}` goes through `markdown_escape`."""
    return _filters(
        jinja2.Environment(
            loader=jinja2.PackageLoader("mlxfleet_operator.reports", "templates"),
            autoescape=False,  # noqa: S701 (Markdown: finalize escapes every value)
            finalize=markdown_escape,
            trim_blocks=True,
            lstrip_blocks=True,
            undefined=jinja2.StrictUndefined,
        )
    )


def _generated() -> str:
    return f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"


def weekly_markdown(report: weekly.WeeklyReport, *, generated: str | None = None) -> str:
    return (
        markdown_environment()
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
    """HTML -> PDF with weasyprint (needs the pango system libraries); fetches nothing but
    `data:` URLs (a refused fetch is a warning in weasyprint's log, the PDF renders without it)."""
    import weasyprint

    fetcher = weasyprint.URLFetcher(
        timeout=1, allowed_protocols={"data"}, allow_redirects=False, fail_on_errors=False
    )
    data: Any = weasyprint.HTML(string=html, base_url=None, url_fetcher=fetcher).write_pdf()
    return bytes(data)


def _plain(text: str) -> str:
    """Text for a Slack-compatible message: &, < and > escaped (they start its markup)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def weekly_summary(report: weekly.WeeklyReport) -> str:
    """The weekly report in a few lines (the webhook's message, the e-mail's first lines)."""
    lines = [f"mlxfleet weekly report {report.this.period.label}"]
    for f in report.headline:
        lines.append(
            f"- {f.label}: {fmt_value(f.now, f.kind)} "
            f"({fmt_change(weekly.change(f.now, f.before))} on the week before)"
        )
    return _plain("\n".join(lines))


def monthly_summary(report: monthly.MonthlyReport) -> str:
    """The monthly report in a few lines: its headline tiles."""
    lines = [f"mlxfleet monthly report {report.s.period.label}"]
    lines += [f"- {t.label}: {t.value}" + (f" ({t.note})" if t.note else "") for t in report.tiles]
    return _plain("\n".join(lines))

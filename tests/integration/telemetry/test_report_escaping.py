"""Reports escape what tenants write, and the PDF renderer fetches nothing (issue 22 item 3).

A model's served name and source come from ModelDeployments and land in telemetry; an S3 key may
hold `<`, `>` and `'`. Before, the `.html.j2` templates were not autoescaped (autoescape matched
the extension `html` only), so markup in a source reached the weekly HTML raw and weasyprint
fetched the URL in it while rendering the monthly PDF. Here the fixture month is renamed so that
one model's name and source carry markup pointing at a real HTTP server on loopback, and the
reports are rendered with the real jinja2 templates and the real weasyprint.
"""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.reports import cli, config, fixture, monthly, render, summary, weekly


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = b"body { color: red }" if self.path.endswith(".css") else b"GIF89a"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback that records every path asked of it."""
    seen: list[str] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


class _Renamed(fixture.FixtureSource):
    """The fixture month with the llama model's name and source replaced."""

    def __init__(self, *, name: str, source: str) -> None:
        super().__init__(interval_hours=6)
        for day, ivs in self._by_day.items():
            self._by_day[day] = [self._rename(iv, name, source) for iv in ivs]

    @staticmethod
    def _rename(
        iv: contract.TelemetryInterval, name: str, source: str
    ) -> contract.TelemetryInterval:
        slots = [
            s.model_copy(update={"model": name, "source": source})
            if s.model == fixture.LLAMA
            else s
            for s in iv.slots
        ]
        swaps = [
            e.model_copy(update={"from_source": source, "to_source": source + "'@2026-10"})
            if e.slot == "chat"
            else e
            for e in iv.swap_events
        ]
        return iv.model_copy(update={"slots": slots, "swap_events": swaps})


def _hostile(base: str) -> tuple[str, str]:
    name = f'chat<img src="{base}/name.png"><b>bold</b>'
    source = (
        f"s3://models/llama/<img src='{base}/source.png'>"
        f"<style>@import url({base}/style.css);</style>|[x]({base}/link)"
    )
    return name, source


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
def test_markup_in_a_model_source_is_text_and_fetches_nothing(
    listener: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, seen = listener
    name, source = _hostile(base)
    telemetry = _Renamed(name=name, source=source)
    cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)

    month = monthly.build(cli.summarise(telemetry, summary.month(2026, 10), cfg))
    html = render.monthly_html(month, generated="now")
    assert name not in html  # the markup is not there as markup ...
    assert "chat&lt;img src=&#34;" + base in html  # ... but as text
    pdf = tmp_path / "monthly.pdf"
    pdf.write_bytes(render.pdf(html))
    text = subprocess.run(
        ["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert "chat<img" in text  # the reader sees what the tenant wrote
    assert seen == []  # and weasyprint asked the server for nothing

    week = weekly.build(
        cli.summarise(telemetry, summary.iso_week(2026, 43), cfg),
        cli.summarise(telemetry, summary.iso_week(2026, 42), cfg),
    )
    page = render.weekly_html(week, generated="now")
    assert "<img" not in page
    assert "<style>@import" not in page
    assert "s3://models/llama/&lt;img src=&#39;" + base in page
    markdown = render.weekly_markdown(week, generated="now")
    assert "<img" not in markdown
    assert "<b>" not in markdown
    assert "<style>" not in markdown
    assert "](" + base not in markdown  # no Markdown link either
    assert "chat&lt;img src=" in markdown
    assert "\\|\\[x\\]" in markdown  # a pipe cannot open a table cell
    for line in markdown.splitlines():
        if line.startswith("| ") and "chat&lt;img" in line:
            assert line.count(" | ") == line.replace("\\|", "").count(" | ")
    assert seen == []


def test_the_pdf_renderer_fetches_no_url_at_all(
    listener: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Even markup that reaches the renderer unescaped makes it fetch nothing: not over HTTP,
    not a local file, not through a redirect; a data: image inside the report still renders."""
    base, seen = listener
    secret = tmp_path / "secret.css"
    secret.write_text("body { color: red }")
    html = (
        "<html><head>"
        f"<link rel='stylesheet' href='{base}/head.css'>"
        f"<link rel='stylesheet' href='file://{secret}'>"
        f"<style>@import url({base}/imported.css);</style>"
        "</head><body><p>report</p>"
        f"<img src='{base}/a.png'><img src='file:///etc/passwd'>"
        "<img src='data:image/gif;base64,R0lGODlhAQABAAAAACw=' alt='own'>"
        "</body></html>"
    )
    data = render.pdf(html)
    assert data.startswith(b"%PDF")
    assert seen == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("2026-10", "2026-10", id="plain"),
        pytest.param('a"b', "a\\22 b", id="quote"),
        pytest.param("</style><img>", "\\3c /style\\3e \\3c img\\3e ", id="end-of-style"),
        pytest.param("a\\b", "a\\5c b", id="backslash"),
    ],
)
def test_css_string(value: str, expected: str) -> None:
    assert str(render.css_string(value)) == expected


def test_footer_title_is_a_css_string() -> None:
    """The monthly footer's title sits in a CSS string inside <style>: escaped for CSS there."""
    page = render.environment().get_template("_style.css.j2").render(title='x"}</style><b>')
    assert 'content: "mlxfleet: x\\22 \\7d \\3c /style\\3e \\3c b\\3e ";' in page

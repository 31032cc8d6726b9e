"""The weekly report's hot spots: nodes that spent time under thermal pressure or ran hottest,
from the telemetry's heat figures (the fixture month: mini-1 throttles an hour a day)."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mlxfleet_operator.reports import (
    cli,
    columnar,
    config,
    dayagg,
    fixture,
    render,
    summary,
    weekly,
)

CFG = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)


@pytest.fixture(scope="module")
def w42() -> weekly.WeeklyReport:
    source = fixture.FixtureSource(interval_hours=3)
    this = cli.summarise(source, summary.iso_week(2026, 42), CFG)
    before = cli.summarise(source, summary.iso_week(2026, 41), CFG)
    return weekly.build(this, before)


def test_the_node_that_throttled_comes_first_with_its_hours(w42: weekly.WeeklyReport) -> None:
    first, *rest = w42.hot_spots
    assert first.node == "mini-1"
    assert first.pressure_hours == pytest.approx(7.0)  # 20 min x 3 h x 7 days
    assert first.pressure_share == pytest.approx(7 / (7 * 24))
    assert first.pressure_hours_before == pytest.approx(7.0)
    assert (first.worst, first.gpu_temperature_max, first.cpu_temperature_max) == (
        "serious",
        96.0,
        91.0,
    )
    assert first.gpu_utilization_mean == pytest.approx(900 / 3600)  # the slot's busy share
    # the cool ones after it, the hottest first
    assert [(h.node, h.pressure_hours, h.worst) for h in rest] == [
        ("mini-2", 0.0, "nominal"),
        ("studio-1", 0.0, "nominal"),
    ]


def test_the_report_files_show_the_table(w42: weekly.WeeklyReport) -> None:
    md = render.weekly_markdown(w42, generated="now")
    assert "## Hot spots" in md
    assert "| mini-1 | 7.0 h | 4.2% | 7.0 h | serious | 96 °C | 91 °C | 25.0% |" in md
    html = render.weekly_html(w42, generated="now")
    assert "<h2>Hot spots</h2>" in html
    assert "<td>mini-1</td>" in html


def test_days_written_before_heat_was_collected_have_no_hot_spots() -> None:
    """Objects compacted by an older operator lack the heat columns: they read as unknown (no
    row, no zero), and the report says no node reported heat."""
    day = date(2026, 10, 14)
    ivs = list(fixture.intervals(first=day, last=day, interval_hours=3))
    table = columnar.to_table(ivs)
    older = table.drop_columns([f"host_{k}" for k in dayagg.HEAT])
    data = _parquet(older)
    part = dayagg.reduce(data, start=day, end=date(2026, 10, 15))
    assert {p.thermal for p in part.nodes.values()} == {-1}
    back = columnar.to_intervals(columnar.decode(data))
    assert {iv.host.thermal_pressure_max for iv in back} == {None}
    period = summary.Period(day, date(2026, 10, 15), "a day")
    this = summary.summarise(part, period)
    report = weekly.build(this, summary.summarise(dayagg.reduce(data, start=day, end=day), period))
    assert report.hot_spots == []
    assert "No node reported heat readings this week." in render.weekly_markdown(
        report, generated="now"
    )


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())

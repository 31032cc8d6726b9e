"""Report figures from the fixture month, checked against hand-computed values."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.core.kit import cost
from mlxfleet_operator.reports import charts, cli, config, fixture, monthly, summary, weekly

CFG = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
LLAMA = cost.ModelKey("team-chat", "llama-3.1-8b")
QWEN = cost.ModelKey("team-search", "qwen-2.5-7b")


@pytest.fixture(scope="module")
def source() -> fixture.FixtureSource:
    return fixture.FixtureSource(interval_hours=3)


@pytest.fixture(scope="module")
def october(source: fixture.FixtureSource) -> summary.PeriodSummary:
    return cli.summarise(source, summary.month(2026, 10), CFG)


def hist(counts: list[int]) -> summary.Hist:
    h = summary.Hist()
    h.add(contract.HistogramData(bounds=[1.0, 2.0, 4.0], counts=counts, sum=0, count=sum(counts)))
    return h


@pytest.mark.parametrize(
    ("counts", "q", "expected"),
    [
        pytest.param([10, 0, 0, 0], 0.5, 0.5, id="inside-first-bucket-from-zero"),
        pytest.param([5, 5, 0, 0], 0.75, 1.5, id="second-bucket-halfway"),
        pytest.param([0, 0, 4, 0], 0.95, 2 + 2 * 0.95, id="third-bucket"),
        pytest.param([1, 0, 0, 9], 0.95, 4.0, id="overflow-gives-largest-bound"),
    ],
)
def test_histogram_quantiles_interpolate_like_prometheus(
    counts: list[int], q: float, expected: float
) -> None:
    assert hist(counts).quantile(q) == pytest.approx(expected)


def test_empty_histogram_has_no_quantile() -> None:
    assert summary.Hist().quantile(0.5) is None


def test_tokens_requests_and_latency_of_the_month(october: summary.PeriodSummary) -> None:
    llama, qwen = october.models[LLAMA], october.models[QWEN]
    # llama: 30 reported days x 24 h x (60,000 + 30,000) tokens, 120 requests an hour
    assert llama.tokens == 30 * 24 * 90_000 == 64_800_000
    assert llama.requests == 30 * 24 * 120
    # qwen: mini-1 30 days + mini-2 28 days + studio-1 2 failover days = 60 node-days
    assert qwen.tokens == 60 * 24 * 54_000 == 77_760_000
    assert qwen.nodes == {"mini-1", "mini-2", "studio-1"}
    # e2e 60/48/12 per 120: p50 ends the (0.5, 1] bucket; p95 rank 114 -> 2.5 + 2.5 x 6/12
    assert llama.e2e.quantile(0.5) == pytest.approx(1.0)
    assert llama.e2e.quantile(0.95) == pytest.approx(3.75)
    # e2e 54/30/6 per 90: p50 rank 45 -> 0.5 + 0.5 x 45/54; p95 rank 85.5 -> 2.5 + 2.5 x 1.5/6
    assert qwen.e2e.quantile(0.5) == pytest.approx(0.5 + 0.5 * 45 / 54)
    assert qwen.e2e.quantile(0.95) == pytest.approx(3.125)


def test_missing_days_are_gaps_not_zeros(october: summary.PeriodSummary) -> None:
    assert october.fleet_gap_days == [date(2026, 10, 27)]
    assert october.daily_tokens[date(2026, 10, 27)] is None
    assert october.daily_tokens[date(2026, 10, 26)] == 24 * (90_000 + 2 * 54_000)
    assert ("mini-2", date(2026, 10, 15)) in october.node_gaps
    assert ("mini-2", date(2026, 10, 16)) in october.node_gaps
    assert len(october.node_gaps) == 3 + 2  # every node on the 27th, mini-2 on 15-16
    # node-days reported: 31 x 3 - 5 gaps = 88 of 93
    assert october.coverage == pytest.approx(88 / 93)
    mini2 = october.outages[0]
    assert (mini2.node, mini2.start, mini2.hours) == (
        "mini-2",
        datetime(2026, 10, 15, tzinfo=UTC),
        48,
    )


def test_cost_of_the_month_by_hand(october: summary.PeriodSummary) -> None:
    fleet = october.fleet
    assert fleet is not None
    studio = next(n for n in fleet.nodes if n.node == "studio-1")
    assert studio.hardware_usd == pytest.approx(3999 / 36 * 744 / 730.5)
    # energy, estimated from nominal watts: 672 h with llama only (1,200 s busy an hour) and
    # 48 failover hours with llama + qwen (2,100 s busy an hour)
    wh = 672 * (12 * 2400 + 95 * 1200) / 3600 + 48 * (12 * 1500 + 95 * 2100) / 3600
    assert studio.energy_kwh == pytest.approx(wh / 1000)
    assert studio.energy_usd == pytest.approx(wh / 1000 * 0.30)
    busy_h = (672 * 1200 + 48 * 2100) / 3600
    assert studio.busy_fraction == pytest.approx(busy_h / 744)
    # studio's serving cost splits llama : qwen by busy seconds, 720 x 1200 : 48 x 900
    share = (720 * 1200) / (720 * 1200 + 48 * 900)
    assert studio.allocations[LLAMA] == pytest.approx(studio.utilised_usd * share)
    llama = next(m for m in fleet.models if m.key == LLAMA)
    assert llama.cost_per_million == pytest.approx(studio.utilised_usd * share / 64.8)
    # reference: 2.50 in / 10.00 out; llama 43.2M + 21.6M, qwen 51.84M + 25.92M
    ref = (43.2 + 51.84) * 2.5 + (21.6 + 25.92) * 10.0
    assert fleet.reference_usd == pytest.approx(ref)
    assert fleet.saving_ratio == pytest.approx(ref / fleet.total_usd)


def test_weekly_diff_explains_the_failover(source: fixture.FixtureSource) -> None:
    this = cli.summarise(source, summary.iso_week(2026, 42), CFG)
    before = cli.summarise(source, summary.iso_week(2026, 41), CFG)
    report = weekly.build(this, before)
    moves = [(m.model, m.node, m.change, m.when) for m in report.moves]
    assert moves == [
        ("qwen-2.5-7b", "studio-1", "added", datetime(2026, 10, 15, tzinfo=UTC)),
        ("qwen-2.5-7b", "studio-1", "removed", datetime(2026, 10, 17, tzinfo=UTC)),
    ]
    assert report.moves[0].why.startswith("failover from mini-2")
    tokens = next(f for f in report.headline if f.label == "Tokens served")
    assert tokens.now == tokens.before == 7 * 24 * (90_000 + 2 * 54_000)
    assert tokens.change == 0


def test_week_with_a_fleet_gap_says_so(source: fixture.FixtureSource) -> None:
    this = cli.summarise(source, summary.iso_week(2026, 44), CFG)  # 26 Oct - 1 Nov
    before = cli.summarise(source, summary.iso_week(2026, 43), CFG)
    report = weekly.build(this, before)
    assert any("No telemetry from any node on Tue 27 Oct" in n for n in report.notes)
    # 26 Oct .. 31 Oct minus the 27th are in the fixture; 1 Nov is not (outside the month)
    assert this.fleet_gap_days == [date(2026, 10, 27), date(2026, 11, 1)]


def test_monthly_headline_tiles(october: summary.PeriodSummary) -> None:
    report = monthly.build(october)
    tiles = {t.label: t for t in report.tiles}
    assert tiles["Tokens served"].value == "142.6M"
    assert "1 day(s) without data" in tiles["Tokens served"].note
    assert tiles["Model swaps"].value == "1 of 2"
    assert tiles["p95 latency"].value.endswith(" s")
    assert [i.what.split(":")[0] for i in report.incidents] == [
        "swap on mini-1/search rolled back; 0 failed requests",
        "mini-2",
        "all 3 nodes",
    ]


def test_chart_labels_are_escaped() -> None:
    svg = charts.cost_per_million_bars([charts.PairBar("<script>", 1.0, 2.0)])
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg


@pytest.mark.parametrize(
    ("text", "start"),
    [
        pytest.param("2026-W42", date(2026, 10, 12), id="explicit"),
        pytest.param(None, date(2026, 10, 12), id="last-complete-week"),
    ],
)
def test_week_argument(text: str | None, start: date) -> None:
    assert cli.parse_week(text, today=date(2026, 10, 21)).start == start


def test_month_argument() -> None:
    assert cli.parse_month(None, today=date(2026, 11, 3)).label == "October 2026"
    with pytest.raises(ValueError, match="2026-10"):
        cli.parse_month("2026-13", today=date(2026, 11, 3))

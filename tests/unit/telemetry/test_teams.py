"""Cost by team: gateway per-key telemetry priced at the fixture month's model costs."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.core.kit import cost
from mlxfleet_operator.reports import (
    columnar,
    config,
    fixture,
    inventory,
    monthly,
    render,
    summary,
    teams,
)

CFG = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
QWEN = cost.ModelKey("team-search", fixture.QWEN)
LLAMA = cost.ModelKey("team-chat", fixture.LLAMA)


def gateway_line(day: int, rows: list[contract.KeyTelemetry]) -> contract.TelemetryInterval:
    return contract.TelemetryInterval(
        component="gateway",
        node="gateway-gw-0-abc123",
        interval_start=datetime(2026, 10, day, 12, tzinfo=UTC),
        interval_seconds=60,
        keys=rows,
    )


def row(
    key: str, team: str | None, served: str, ns: str, tokens: int, **kw: object
) -> contract.KeyTelemetry:
    return contract.KeyTelemetry(
        key=key,
        team=team,
        namespace=ns,
        model="chat",
        served=served,
        backend=f"{ns}/x",
        requests=10,
        prompt_tokens=tokens // 2,
        completion_tokens=tokens - tokens // 2,
        **kw,
    )


GATEWAY = [
    gateway_line(
        3,
        [
            row("search-app", "search", fixture.QWEN, "team-search", 1_000_000),
            row("chat-app", "chat", fixture.LLAMA, "team-chat", 400_000),
        ],
    ),
    gateway_line(
        4,
        [
            row("search-batch", "search", fixture.QWEN, "team-search", 500_000),
            row(
                "chat-app",
                "chat",
                "",
                "",
                300_000,
                external=True,
                errors={"failed": 2},
                rate_limited=5,
            ),
            row("stray", None, fixture.LLAMA, "team-chat", 100),
        ],
    ),
]


class WithGateway:
    """The fixture month's days with the gateway lines added, as the columnar pipeline reads
    them (so the lines must survive encoding and the day reduction)."""

    def __init__(self) -> None:
        self.fixture = fixture.FixtureSource(interval_hours=3)

    def day_parquet(self, day: date) -> bytes | None:
        tables = [columnar.decode(data)] if (data := self.fixture.day_parquet(day)) else []
        lines = [g for g in GATEWAY if g.interval_start.date() == day]
        if lines:
            tables.append(columnar.to_table(lines))
        return columnar.encode(columnar.union(tables)) if tables else None


@pytest.fixture(scope="module")
def october() -> summary.PeriodSummary:
    period = summary.month(2026, 10)
    inputs, _ = inventory.build(CFG, None).cost_inputs()
    return summary.summarise(
        summary.load(WithGateway(), period),
        period,
        known_nodes=set(CFG.nodes),
        namespaces=CFG.namespaces,
        cost_inputs=inputs,
        reference=CFG.reference_price(),
    )


def test_gateway_lines_are_not_nodes(october: summary.PeriodSummary) -> None:
    assert set(october.nodes) == {"studio-1", "mini-1", "mini-2"}
    assert len(october.gateway) == 2


def test_team_cost_is_its_tokens_at_each_models_cost(october: summary.PeriodSummary) -> None:
    assert october.fleet is not None
    cpm = {m.key: m.cost_per_million for m in october.fleet.models}
    report = monthly.build(october)
    by_team = {t.team: t for t in report.teams}
    search, chat = by_team["search"], by_team["chat"]
    assert search.keys == {"search-app", "search-batch"}
    assert search.tokens == 1_500_000
    assert search.cost_usd == pytest.approx(1.5 * (cpm[QWEN] or 0))
    assert chat.cost_usd == pytest.approx(0.4 * (cpm[LLAMA] or 0))  # external tokens not priced
    assert (chat.external_tokens, chat.errors, chat.rate_limited) == (300_000, 2, 5)
    assert by_team[teams.NO_TEAM].keys == {"stray"}
    assert [t.team for t in report.teams][:2] == sorted(
        ["search", "chat"], key=lambda t: -(by_team[t].cost_usd or 0)
    )


def test_the_monthly_report_shows_cost_by_team(october: summary.PeriodSummary) -> None:
    html = render.monthly_html(monthly.build(october), generated="test")
    assert "Cost by team" in html
    assert "search-app, search-batch" in html

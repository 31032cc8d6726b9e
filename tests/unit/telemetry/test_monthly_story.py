"""What the monthly PDF tells an executive (issue 28 item 9): the headline cost per million
tokens adds up from the per-model figures plus idle capacity, the idle share is called out, the
cloud reference names its provider and the date of its prices, and the month is compared with
the one before. Built from the fixture month (and the month before it) as `report sample` does."""

from __future__ import annotations

import pytest

from mlxfleet_operator.reports import cli, config, fixture, monthly, render, summary

OCTOBER, SEPTEMBER = summary.month(2026, 10), summary.month(2026, 9)


@pytest.fixture(scope="module")
def months() -> tuple[summary.PeriodSummary, summary.PeriodSummary]:
    cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
    src = fixture.FixtureSource()
    return cli.summarise(src, OCTOBER, cfg), cli.summarise(src, SEPTEMBER, cfg)


def test_the_headline_cost_per_token_is_the_models_plus_idle_capacity(
    months: tuple[summary.PeriodSummary, summary.PeriodSummary],
) -> None:
    report = monthly.build(*months)
    rc = report.reconcile
    assert rc is not None
    assert rc.all_in_cpm == pytest.approx(rc.serving_cpm + rc.idle_cpm)
    tokens = sum(m.tokens for m in report.models)
    weighted = sum((m.cpm or 0) * m.tokens for m in report.models) / tokens
    assert rc.serving_cpm == pytest.approx(weighted)  # the per-model figures, by their tokens
    assert rc.idle_share == pytest.approx(0.714, abs=0.01)  # the sample: mostly idle Macs
    cpm_tile = next(t for t in report.tiles if t.label == "Cost per million tokens")
    assert f"${rc.serving_cpm:,.2f} serving + ${rc.idle_cpm:,.2f} idle" in cpm_tile.note
    assert report.idle_callout is not None
    assert "71%" in report.idle_callout
    html = render.monthly_html(report, generated="now")
    assert "Idle capacity: paid for while no request ran" in html  # the page-2 rows
    assert "gpt-4o (OpenAI) list prices as of 2026-10-01" in html


def test_the_month_is_compared_with_the_one_before(
    months: tuple[summary.PeriodSummary, summary.PeriodSummary],
) -> None:
    report = monthly.build(*months)
    rows = {c.label: c for c in report.changes}
    share = fixture.PREVIOUS_SHARE
    assert rows["Requests"].change == f"{(1 - share) / share * 100:+.1f}%"
    assert rows["Total fleet cost"].change.startswith("+")  # 31 days of hardware against 30
    assert "September 2026" in render.monthly_html(report, generated="now")
    alone = monthly.build(months[0], None)
    assert alone.changes == []
    assert "nothing to compare with" in render.monthly_html(alone, generated="now")


def test_a_reference_without_provider_or_date_says_so() -> None:
    cfg = config.ReportConfig.from_yaml(
        "reference: {name: some API, inputUSDPerMillion: 1, outputUSDPerMillion: 2}"
    )
    price = cfg.reference_price()
    assert price is not None
    assert price.label == (
        "some API list prices (reference.provider and reference.asOf not configured)"
    )

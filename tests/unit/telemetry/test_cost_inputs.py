"""Which node's cost inputs apply to which telemetry: InferenceNodes, report.yaml, aliases.

Issue 15 item 2: the monthly report crashed (ZeroDivisionError) when no node of the cost table
matched a node with telemetry; a report must instead say which nodes have no cost inputs.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from datetime import date
from pathlib import Path

import pytest
import yaml

from mlxfleet_operator.api import inferencenode
from mlxfleet_operator.reports import (
    cli,
    columnar,
    config,
    detail,
    fixture,
    inventory,
    monthly,
    render,
    summary,
)

REPO = Path(__file__).resolve().parents[3]
OCTOBER = summary.month(2026, 10)
# The cost table the shipped report-config.yaml held before: names no agent reports under.
OLD_SAMPLE_TABLE = """\
nodes:
  studio-1: {purchasePriceUSD: 3999, amortizationMonths: 36, electricityUSDPerKWh: 0.30,
             idlePowerWatts: 12, busyPowerWatts: 95}
  mini-1: {purchasePriceUSD: 1399, amortizationMonths: 24, electricityUSDPerKWh: 0.30,
           idlePowerWatts: 5, busyPowerWatts: 38}
reference: {name: Cloud API (reference), inputUSDPerMillion: 2.50, outputUSDPerMillion: 10.00}
"""
HOST_NAMES = {"studio-1": "Mac-Studio", "mini-1": "mac-mini-a", "mini-2": "mac-mini-b"}
STUDIO_COST = {
    "purchasePriceUSD": 3999,
    "amortizationMonths": 36,
    "electricityUSDPerKWh": 0.30,
    "idlePowerWatts": 12,
    "busyPowerWatts": 95,
}


def shipped_report_yaml() -> str:
    cm = yaml.safe_load((REPO / "manifests" / "cronjobs" / "report-config.yaml").read_text())
    text: str = cm["data"]["report.yaml"]
    return text


def node(name: str, cost: Mapping[str, object] | None) -> inventory.ClusterNode:
    return inventory.ClusterNode(
        name=name, cost=None if cost is None else inferencenode.Cost.model_validate(cost)
    )


@pytest.fixture(scope="module")
def host_named() -> fixture.FixtureSource:
    """The fixture month as agents that kept their host names would ship it."""
    return fixture.FixtureSource(interval_hours=6, names=HOST_NAMES)


@pytest.mark.parametrize(
    "cfg_text",
    [
        pytest.param(OLD_SAMPLE_TABLE, id="old-sample-cost-table"),
        pytest.param(shipped_report_yaml(), id="shipped-report-config"),
    ],
)
def test_monthly_report_when_no_cost_input_matches_telemetry(
    host_named: fixture.FixtureSource, cfg_text: str
) -> None:
    cfg = config.ReportConfig.from_yaml(cfg_text)
    report = monthly.build(cli.summarise(host_named, OCTOBER, cfg))  # ZeroDivisionError before
    html = render.monthly_html(report, generated="now")
    unmatched = [n for n in report.notes if "Mac-Studio, mac-mini-a, mac-mini-b" in n]
    assert len(unmatched) == 1, report.notes
    assert unmatched[0].startswith("No cost inputs for Mac-Studio, mac-mini-a, mac-mini-b:")
    assert "nodeName" in unmatched[0]
    assert "aliases" in unmatched[0]
    assert "No cost inputs for Mac-Studio, mac-mini-a, mac-mini-b:" in html
    tiles = {t.label: t for t in report.tiles}
    assert tiles["Cost per million tokens"].value == "n/a"
    assert tiles["Tokens served"].value == "142.6M"  # the telemetry itself is all there


def test_cost_table_names_without_telemetry_are_named(host_named: fixture.FixtureSource) -> None:
    cfg = config.ReportConfig.from_yaml(OLD_SAMPLE_TABLE)
    s = cli.summarise(host_named, OCTOBER, cfg)
    silent = [n for n in s.cost_problems if n.startswith("No telemetry")]
    assert len(silent) == 1
    assert "mini-1, studio-1" in silent[0]
    assert s.unpriced_nodes == ["Mac-Studio", "mac-mini-a", "mac-mini-b"]


def test_weekly_report_names_the_nodes_without_cost_inputs(
    host_named: fixture.FixtureSource,
) -> None:
    cfg = config.ReportConfig.from_yaml(OLD_SAMPLE_TABLE)
    files = cli.weekly_files(host_named, summary.iso_week(2026, 42), cfg)
    md = files["weekly-2026-W42.md"][0].decode()
    html = files["weekly-2026-W42.html"][0].decode()
    for text in (md, html):
        assert "No cost inputs for Mac-Studio, mac-mini-a, mac-mini-b:" in text


def test_aliases_map_telemetry_names_to_nodes(host_named: fixture.FixtureSource) -> None:
    aliases = yaml.safe_dump({"aliases": {v: k for k, v in HOST_NAMES.items()}})
    cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML + aliases)
    s = cli.summarise(host_named, OCTOBER, cfg)
    assert set(s.nodes) == {"studio-1", "mini-1", "mini-2"}
    assert s.unpriced_nodes == []
    assert s.cost_problems == []
    assert s.fleet is not None
    studio = next(n for n in s.fleet.nodes if n.node == "studio-1")
    assert studio.hardware_usd == pytest.approx(3999 / 36 * 744 / 730.5)


def test_costs_come_from_inference_nodes() -> None:
    cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML.split("nodes:")[0])
    cluster = [
        node("studio-1", STUDIO_COST),
        node("mini-1", {**STUDIO_COST, "purchasePriceUSD": 1399, "amortizationMonths": 24}),
        node("mini-2", None),
    ]
    inv = inventory.build(cfg, cluster)
    assert sorted(inv.nodes) == ["mini-1", "mini-2", "studio-1"]
    inputs, problems = inv.cost_inputs()
    assert inputs["studio-1"].purchase_price_usd == 3999
    assert inputs["mini-1"].amortization_months == 24
    assert problems == ["InferenceNode mini-2: spec.cost is not set; left out of the cost figures"]
    s = cli.summarise(fixture.FixtureSource(interval_hours=6), OCTOBER, cfg, cluster=cluster)
    assert s.fleet is not None
    assert sorted(n.node for n in s.fleet.nodes) == ["mini-1", "studio-1"]
    assert s.cost_problems == problems


def test_report_yaml_overrides_single_fields_of_an_inference_node() -> None:
    cfg = config.ReportConfig.from_yaml(
        "nodes:\n  studio-1: {electricityUSDPerKWh: 0.10}\n  bench-mac: {purchasePriceUSD: 1}\n"
    )
    inv = inventory.build(cfg, [node("studio-1", STUDIO_COST)])
    inputs, problems = inv.cost_inputs()
    assert inputs["studio-1"].electricity_usd_per_kwh == 0.10
    assert inputs["studio-1"].purchase_price_usd == 3999
    # a report.yaml node that is no InferenceNode still counts (running outside a cluster)
    assert problems == [
        "node bench-mac: spec.cost.amortizationMonths, spec.cost.electricityUSDPerKWh not set; "
        "left out of the cost figures"
    ]


def test_without_a_cluster_report_yaml_is_the_inventory() -> None:
    cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
    inv = inventory.build(cfg, None)
    assert sorted(inv.nodes) == ["mini-1", "mini-2", "studio-1"]
    assert inv.cost_inputs()[1] == []


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("aliases: {a: ''}", "aliases.a", id="empty-target"),
        pytest.param("aliases: [a]", "aliases", id="not-a-mapping"),
        pytest.param("aliases: {a: a}", "aliases.a", id="maps-to-itself"),
    ],
)
def test_bad_aliases_name_the_field(text: str, names: str) -> None:
    with pytest.raises(config.ConfigError, match=names.replace(".", r"\.")):
        config.ReportConfig.from_yaml(text)


def _june_report(nodes: int) -> monthly.MonthlyReport:
    """June's report of `nodes` priced nodes whose telemetry is one generated day."""
    from benchmarks import report_bench

    day = date(2026, 6, 3)
    names = report_bench._node_names(nodes)
    data = columnar.encode(report_bench.day_table(day, names, seed=3))

    class OneDay:
        def day_parquet(self, d: date) -> bytes | None:
            return data if d == day else None

    june = summary.month(2026, 6)
    return monthly.build(cli.summarise(OneDay(), june, report_bench._report_config(names)))


def test_page_one_of_a_big_fleet_shows_the_largest_ten() -> None:
    """30 nodes and their models: page 1's tables and charts keep to the ten that cost most (or
    served most tokens); page 2 lists the 25 that cost most and sums the other 5; the CSV next
    to the PDF has every one."""
    report = _june_report(30)
    assert len(report.nodes) == 30
    assert len(report.top_nodes) == monthly.SUMMARY_ROWS
    costs = sorted((n.total_usd or 0.0 for n in report.nodes), reverse=True)
    assert [n.total_usd or 0.0 for n in report.top_nodes] == costs[: monthly.SUMMARY_ROWS]
    html = render.monthly_html(report, generated="now")
    assert "the 10 that cost most of 30; every node in monthly-2026-06-nodes.csv" in html
    assert html.count("<tr><td>mac-0") == 10 + monthly.DETAIL_ROWS  # page 1 + page 2's table
    assert "<tr><td>5 other nodes</td>" in html
    assert [n.total_usd for n in report.detail_nodes] == [
        n.total_usd for n in sorted(report.nodes, key=lambda n: -(n.total_usd or 0.0))[:25]
    ]
    left_out = {n.node for n in report.nodes} - {n.node for n in report.detail_nodes}
    assert report.other_nodes.count == 5
    assert report.other_nodes.cost_usd == pytest.approx(
        sum(n.total_usd or 0.0 for n in report.nodes if n.node in left_out)
    )
    rows = list(csv.DictReader(io.StringIO(detail.nodes_csv(report).decode())))
    assert [r["node"] for r in rows] == [n.node for n in report.nodes]  # all 30
    assert float(rows[0]["total_usd"]) == report.nodes[0].total_usd


def test_the_other_rows_sum_what_page_two_leaves_out() -> None:
    """Page 2's "other models" and "other nodes" rows: the rows its tables leave out, counted and
    summed (cost, tokens, requests, hardware, energy, idle), with the cost per million tokens and
    the reference's of those tokens, and the nodes' mean uptime and busy share."""
    report = _june_report(30)
    shown = {id(m) for m in report.detail_models}
    models = [m for m in report.models if id(m) not in shown]
    assert len(models) == len(report.models) - monthly.DETAIL_ROWS > 0
    o = report.other_models
    tokens = sum(m.tokens for m in models)
    usd = sum(m.cost_usd or 0.0 for m in models)
    reference = sum((m.reference_cpm or 0.0) * m.tokens / 1e6 for m in models)
    assert (o.count, o.requests, o.tokens) == (
        len(models),
        sum(m.requests for m in models),
        tokens,
    )
    assert o.cost_usd == pytest.approx(usd)
    assert o.cpm == pytest.approx(usd / tokens * 1e6)
    assert o.reference_cpm == pytest.approx(reference / tokens * 1e6)
    assert o.uptime is None
    assert o.hardware_usd is None
    shown = {id(n) for n in report.detail_nodes}
    nodes = [n for n in report.nodes if id(n) not in shown]
    o = report.other_nodes
    tokens = sum(n.tokens for n in nodes)
    usd = sum(n.total_usd or 0.0 for n in nodes)
    assert (o.count, o.requests, o.tokens) == (5, sum(n.requests for n in nodes), tokens)
    assert o.cost_usd == pytest.approx(usd)
    assert o.cpm == pytest.approx(usd / tokens * 1e6)
    assert o.uptime == pytest.approx(sum(n.uptime for n in nodes) / 5)
    assert o.busy == pytest.approx(sum(n.busy for n in nodes) / 5)
    assert o.hardware_usd == pytest.approx(sum(n.hardware_usd or 0.0 for n in nodes))
    assert o.energy_kwh == pytest.approx(sum(n.energy_kwh or 0.0 for n in nodes))
    assert o.idle_usd == pytest.approx(sum(n.idle_usd or 0.0 for n in nodes))
    assert o.reference_cpm is None
    html = render.monthly_html(report, generated="now")
    assert f"{report.other_models.count} other models</td>" in html
    assert render.fmt_value(report.other_models.reference_cpm, "usd_m") in html
    small = _june_report(3)  # every row fits page 2: no "other" rows
    assert small.other_models == monthly.Rest()
    assert small.other_nodes == monthly.Rest()
    assert small.other_models.cpm is None
    assert "other nodes" not in render.monthly_html(small)

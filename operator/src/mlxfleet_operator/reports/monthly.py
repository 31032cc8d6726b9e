"""The monthly executive report: headline figures, charts and per-model / per-node tables.

Builds plain rows from one month's `summary.PeriodSummary`; `render.monthly_html` + `render.pdf`
turn them into the PDF. Page 1 is the one-page summary; page 2 has the tables, incidents, data
gaps and the method.
May import: the standard library, `core.cost`, reports.summary, reports.charts. Called by: cli.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from mlxfleet_operator.core import cost
from mlxfleet_operator.reports import charts, summary, teams

SUMMARY_ROWS = 10  # models and nodes on page 1 (the largest); page 2 lists them all
Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class Tile:
    label: str
    value: str
    note: str


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    namespace: str
    nodes: str
    requests: int
    tokens: int
    p50: float | None
    p95: float | None
    cost_usd: float | None
    cpm: float | None
    reference_cpm: float | None

    @property
    def saving(self) -> float | None:
        if self.cpm is None or self.reference_cpm is None or self.cpm == 0:
            return None
        return self.reference_cpm / self.cpm


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    uptime: float
    busy: float
    tokens: int
    hardware_usd: float | None
    energy_kwh: float | None
    energy_note: str
    total_usd: float | None
    idle_usd: float | None
    cpm: float | None
    peak_memory: int
    memory_total: int


@dataclass(frozen=True, slots=True)
class Incident:
    when: str
    what: str


@dataclass(slots=True)
class MonthlyReport:
    s: summary.PeriodSummary
    tiles: list[Tile] = field(default_factory=list)
    models: list[ModelRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    teams: list[teams.TeamRow] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    daily_chart: str = ""
    cpm_chart: str = ""
    split_chart: str = ""
    reference_name: str | None = None
    top_models: list[ModelRow] = field(default_factory=list)  # page 1 (all on page 2)
    top_nodes: list[NodeRow] = field(default_factory=list)


def _reference_cpm(ref: cost.ReferencePrice | None, prompt: int, completion: int) -> float | None:
    if ref is None or prompt + completion == 0:
        return None
    return (
        ref.price(prompt_tokens=prompt, completion_tokens=completion) / (prompt + completion) * 1e6
    )


def build(s: summary.PeriodSummary) -> MonthlyReport:
    r = MonthlyReport(s=s)
    f = s.fleet
    ref = f.reference if f else None
    r.reference_name = ref.name if ref else None
    p95 = s.fleet_quantile(0.95)
    swaps_total = len(s.swaps)
    problems = [sw for sw in s.swaps if sw.event.outcome != "Completed" or sw.event.requests_failed]
    outages = s.outages
    gap_days = s.fleet_gap_days
    cpm = f.loaded_cost_per_million if f else None
    ref_cpm = (
        _reference_cpm(
            ref,
            sum(m.prompt_tokens for m in s.models.values()),
            sum(m.completion_tokens for m in s.models.values()),
        )
        if ref
        else None
    )
    saving = f.saving_ratio if f else None
    if not saving:  # 0: the priced nodes served no tokens, nothing to compare
        saving = None
    r.tiles = [
        Tile(
            "Tokens served",
            _tokens(s.tokens),
            f"{s.requests:,} requests; {len(gap_days)} day(s) without data"
            if gap_days
            else f"{s.requests:,} requests",
        ),
        Tile(
            "Cost per million tokens",
            f"${cpm:,.2f}" if cpm is not None else "n/a",
            (
                f"vs ${ref_cpm:,.2f} reference API: {saving:.1f}x cheaper"
                if saving and ref_cpm
                else "all-in"
            )
            if saving is None or saving >= 1
            else f"vs ${ref_cpm:,.2f} reference API: {1 / saving:.1f}x dearer",
        ),
        Tile(
            "Total fleet cost",
            f"${f.total_usd:,.0f}" if f else "n/a",
            _cost_note(f, unpriced=len(s.unpriced_nodes)),
        ),
        Tile(
            "Telemetry uptime",
            f"{s.coverage:.1%}",
            f"of node-hours; {len({(o.start, o.end) for o in outages})} outage(s)",
        ),
        Tile(
            "p95 latency",
            f"{p95:.2f} s" if p95 is not None else "n/a",
            f"p50 {s.fleet_quantile(0.5) or 0:.2f} s, end to end",
        ),
        Tile(
            "Model swaps",
            f"{s.swaps_clean} of {swaps_total}",
            "completed with zero failed requests",
        ),
    ]
    by_key = {mc.key: mc for mc in f.models} if f else {}
    for key, m in s.models.items():
        mc = by_key.get(key)
        r.models.append(
            ModelRow(
                model=key.model,
                namespace=key.namespace,
                nodes=", ".join(sorted(m.nodes)),
                requests=m.requests,
                tokens=m.tokens,
                p50=m.e2e.quantile(0.5),
                p95=m.e2e.quantile(0.95),
                cost_usd=mc.allocated_usd if mc else None,
                cpm=mc.cost_per_million if mc else None,
                reference_cpm=_reference_cpm(ref, m.prompt_tokens, m.completion_tokens),
            )
        )
    r.teams = teams.rows(s.gateway, {k: mc.cost_per_million for k, mc in by_key.items()})
    node_cost = {n.node: n for n in f.nodes} if f else {}
    for name, ns in s.nodes.items():
        nc = node_cost.get(name)
        source = "/".join(sorted(ns.power_sources)) or ("spec watts" if nc else "unknown")
        r.nodes.append(
            NodeRow(
                node=name,
                uptime=min(1.0, ns.covered_seconds / s.period.seconds),
                busy=ns.busy_seconds / s.period.seconds,
                tokens=ns.tokens,
                hardware_usd=nc.hardware_usd if nc else None,
                energy_kwh=nc.energy_kwh
                if nc
                else (ns.energy_wh / 1000 if ns.energy_known else None),
                energy_note=source,
                total_usd=nc.total_usd if nc else None,
                idle_usd=nc.idle_usd if nc else None,
                cpm=nc.cost_per_million if nc else None,
                peak_memory=ns.memory_used_max,
                memory_total=ns.memory_total_bytes,
            )
        )
    windows: dict[tuple[object, object], list[str]] = {}
    for o in outages:
        windows.setdefault((o.start, o.end), []).append(o.node)
    for o in outages:
        nodes = windows.pop((o.start, o.end), None)
        if nodes is None:
            continue
        who = f"all {len(nodes)} nodes" if len(nodes) == len(s.nodes) > 1 else ", ".join(nodes)
        r.incidents.append(
            Incident(
                f"{o.start:%d %b %H:%M}",
                f"{who}: no telemetry for {o.hours:.0f} h (until {o.end:%d %b %H:%M} UTC)",
            )
        )
    for sw in problems:
        e = sw.event
        r.incidents.append(
            Incident(
                f"{e.at:%d %b %H:%M}",
                f"swap on {sw.node}/{e.slot} {summary.words(e.outcome)}; "
                f"{e.requests_failed} failed requests",
            )
        )
    r.incidents.sort(key=lambda i: i.when)
    r.gaps = [f"{d:%a %d %b}: no node reported" for d in gap_days]
    fleet_gap = set(gap_days)
    r.gaps += [f"{d:%a %d %b}: {node} missing" for node, d in s.node_gaps if d not in fleet_gap]
    r.notes = list(s.cost_problems)
    if s.dropped_intervals:
        r.notes.append(f"{s.dropped_intervals} intervals were dropped by full agent buffers.")
    days = s.period.days
    r.daily_chart = charts.daily_bars(days, [s.daily_tokens[d] for d in days])
    r.top_models = _top(r.models, key=lambda m: m.tokens)
    r.top_nodes = _top(r.nodes, key=lambda n: n.total_usd or 0.0)
    r.cpm_chart = charts.cost_per_million_bars(
        [charts.PairBar(m.model, m.cpm, m.reference_cpm) for m in r.top_models]
    )
    shown = {n.node for n in r.top_nodes}
    r.split_chart = charts.split_bars(
        [
            (n.node, n.total_usd - n.idle_usd, n.idle_usd)
            for n in (f.nodes if f else [])
            if n.node in shown
        ]
    )
    return r


def _top(rows: list[Row], *, key: Callable[[Row], float]) -> list[Row]:
    """Page 1 of a big fleet: the SUMMARY_ROWS largest by `key`; a small fleet: every row, in
    its order."""
    if len(rows) <= SUMMARY_ROWS:
        return list(rows)
    return sorted(rows, key=key, reverse=True)[:SUMMARY_ROWS]


def _cost_note(f: cost.FleetCost | None, *, unpriced: int) -> str:
    if f is None:
        return "cost inputs missing"
    note = f"of which idle capacity ${f.idle_usd:,.0f}"
    if unpriced:
        note += f"; {unpriced} node(s) without cost inputs left out"
    return note


def _tokens(v: int) -> str:
    if v >= 1e9:
        return f"{v / 1e9:.2f}B"
    if v >= 1e6:
        return f"{v / 1e6:.1f}M"
    return f"{v:,}"

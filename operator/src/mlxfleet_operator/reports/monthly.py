"""The monthly executive report: per-model / per-node tables, incidents, gaps and charts, under
page 1's headline figures (reports.headline).

Builds plain rows from one month's `summary.PeriodSummary`; `render.monthly_html` + `render.pdf`
turn them into the PDF. Page 1 is the one-page summary; page 2 has the detail tables (the
DETAIL_ROWS models and nodes that cost most, the rest summed in one row), incidents, data gaps and
the method. Page 1 also reconciles the headline cost per million tokens with the per-model
figures (`headline.reconcile`: serving + idle), calls out the idle share of cost, names the
reference price's provider and date, and compares the month with the one before
(`headline.changes`). Every row (`models`, `nodes`) goes to the CSV files next to the PDF
(reports.detail), so the PDF stays a few pages whatever the size of the fleet.
May import: the standard library, `core.kit.cost`, reports.summary, reports.charts,
reports.headline, reports.teams.
Called by: cli, reports.detail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from mlxfleet_operator.core.kit import cost
from mlxfleet_operator.reports import charts, headline, summary, teams

SUMMARY_ROWS = 10  # models and nodes on page 1 (the largest)
DETAIL_ROWS = 25  # models and nodes in page 2's tables (the costliest); the rest summed, all in CSV
SHOWN_NODE_NAMES = 3  # a model on more nodes than this shows their number, the CSV their names
Row = TypeVar("Row")


def file_stem(period: summary.Period) -> str:
    """`monthly-YYYY-MM`: the PDF, the HTML and the detail CSVs are named after it."""
    return f"monthly-{period.start:%Y-%m}"


def detail_names(period: summary.Period) -> tuple[str, str]:
    """The CSV files with every node and every model of the month (next to the PDF)."""
    stem = file_stem(period)
    return f"{stem}-nodes.csv", f"{stem}-models.csv"


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    namespace: str
    nodes: str  # what the tables show: the names, or their number when there are many
    requests: int
    tokens: int
    p50: float | None
    p95: float | None
    cost_usd: float | None
    cpm: float | None
    reference_cpm: float | None
    node_names: tuple[str, ...] = ()
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def reference_usd(self) -> float | None:
        """What the reference API charges for this model's tokens."""
        if self.reference_cpm is None:
            return None
        return cost.usd_for(self.tokens, self.reference_cpm)

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
    requests: int = 0


@dataclass(frozen=True, slots=True)
class Rest:
    """The rows left out of a detail table, summed: `count` of them (0: none left out)."""

    count: int = 0
    requests: int = 0
    tokens: int = 0
    cost_usd: float | None = None  # models: allocated serving cost; nodes: total cost
    reference_usd: float | None = None  # models only: what the reference API charges for them
    uptime: float | None = None  # nodes only: the mean over the rows left out
    busy: float | None = None
    hardware_usd: float | None = None
    energy_kwh: float | None = None
    idle_usd: float | None = None

    @property
    def cpm(self) -> float | None:
        return _per_million(self.cost_usd, self.tokens)

    @property
    def reference_cpm(self) -> float | None:
        return _per_million(self.reference_usd, self.tokens)


@dataclass(frozen=True, slots=True)
class Incident:
    when: str
    what: str


@dataclass(slots=True)
class MonthlyReport:
    s: summary.PeriodSummary
    tiles: list[headline.Tile] = field(default_factory=list)
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
    top_models: list[ModelRow] = field(default_factory=list)  # page 1
    top_nodes: list[NodeRow] = field(default_factory=list)
    detail_models: list[ModelRow] = field(default_factory=list)  # page 2 (all in the CSV)
    detail_nodes: list[NodeRow] = field(default_factory=list)
    other_models: Rest = field(default_factory=Rest)  # the models page 2 leaves out, summed
    other_nodes: Rest = field(default_factory=Rest)
    detail_files: tuple[str, str] = ("", "")  # (nodes CSV, models CSV)
    reference_label: str | None = None  # whose list prices, as of when
    reconcile: headline.Reconcile | None = None
    idle_callout: str | None = None
    previous_label: str | None = None
    changes: list[headline.Change] = field(default_factory=list)  # month over month; empty: no data


def _reference_cpm(ref: cost.ReferencePrice | None, prompt: int, completion: int) -> float | None:
    if ref is None:
        return None
    price = ref.price(prompt_tokens=prompt, completion_tokens=completion)
    return cost.per_million(price, prompt + completion)


def build(s: summary.PeriodSummary, previous: summary.PeriodSummary | None = None) -> MonthlyReport:
    """The report of month `s`; `previous`: the month before, for the month-over-month table
    (None, or a month without telemetry: the report says there is nothing to compare)."""
    r = MonthlyReport(s=s)
    f = s.fleet
    ref = f.reference if f else None
    r.reference_name = ref.name if ref else None
    r.reference_label = ref.label if ref else None
    r.reconcile = headline.reconcile(f)
    r.idle_callout = headline.idle_callout(r.reconcile)
    r.previous_label = previous.period.label if previous is not None else None
    r.changes = headline.changes(s, previous) if previous is not None and previous.requests else []
    problems = [sw for sw in s.swaps if sw.event.outcome != "Completed" or sw.event.requests_failed]
    outages = s.outages
    gap_days = s.fleet_gap_days
    ref_cpm = (
        _reference_cpm(
            ref,
            sum(m.prompt_tokens for m in s.models.values()),
            sum(m.completion_tokens for m in s.models.values()),
        )
        if ref
        else None
    )
    r.tiles = headline.tiles(
        s, rc=r.reconcile, ref_cpm=ref_cpm, found=r.changes, previous_label=r.previous_label
    )
    by_key = {mc.key: mc for mc in f.models} if f else {}
    for key, m in s.models.items():
        mc = by_key.get(key)
        names = tuple(sorted(m.nodes))
        r.models.append(
            ModelRow(
                model=key.model,
                namespace=key.namespace,
                nodes=", ".join(names)
                if len(names) <= SHOWN_NODE_NAMES
                else f"{len(names):,} nodes",
                node_names=names,
                errors=m.errors,
                prompt_tokens=m.prompt_tokens,
                completion_tokens=m.completion_tokens,
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
                requests=ns.requests,
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
    r.detail_models = _top(r.models, key=_model_cost, limit=DETAIL_ROWS)
    r.detail_nodes = _top(r.nodes, key=lambda n: n.total_usd or 0.0, limit=DETAIL_ROWS)
    left_models = _left_out(r.models, r.detail_models)
    r.other_models = replace(
        _rest(left_models, [m.cost_usd for m in left_models]),
        reference_usd=_total([m.reference_usd for m in left_models]),
    )
    left_nodes = _left_out(r.nodes, r.detail_nodes)
    r.other_nodes = replace(
        _rest(left_nodes, [n.total_usd for n in left_nodes]),
        uptime=_mean([n.uptime for n in left_nodes]),
        busy=_mean([n.busy for n in left_nodes]),
        hardware_usd=_total([n.hardware_usd for n in left_nodes]),
        energy_kwh=_total([n.energy_kwh for n in left_nodes]),
        idle_usd=_total([n.idle_usd for n in left_nodes]),
    )
    r.detail_files = detail_names(s.period)
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


def _top(
    rows: list[Row], *, key: Callable[[Row], float | tuple[float, float]], limit: int = SUMMARY_ROWS
) -> list[Row]:
    """A table of a big fleet: the `limit` largest rows by `key`; a small fleet: every row, in
    its order."""
    if len(rows) <= limit:
        return list(rows)
    return sorted(rows, key=key, reverse=True)[:limit]


def _model_cost(m: ModelRow) -> tuple[float, float]:
    """Costliest first; without cost inputs, most tokens first."""
    return (m.cost_usd or 0.0, float(m.tokens))


def _left_out(rows: list[Row], shown: list[Row]) -> list[Row]:
    kept = {id(x) for x in shown}
    return [x for x in rows if id(x) not in kept]


def _total(values: list[float | None]) -> float | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _per_million(usd: float | None, tokens: int) -> float | None:
    return cost.per_million(usd, tokens) if usd is not None else None


def _rest(rows: Sequence[ModelRow] | Sequence[NodeRow], costs: list[float | None]) -> Rest:
    """A detail table's "others" row: the rows it leaves out, counted and summed with their
    `costs` (one a row); the table adds the figures only it has (`dataclasses.replace`)."""
    return Rest(
        count=len(rows),
        requests=sum(r.requests for r in rows),
        tokens=sum(r.tokens for r in rows),
        cost_usd=_total(costs),
    )

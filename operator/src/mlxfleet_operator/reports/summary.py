"""Turns a period's telemetry into per-model and per-node figures (and their cost).

`load` reduces each day of the period (a Parquet object from a `TelemetrySource`: a compacted
day, or the raw objects of a day put in the same form) with `dayagg.reduce`; `summarise` turns
the merged result into figures, after renaming aliased nodes and resolving namespaces.
Missing data stays missing: a node-day without intervals is a gap (listed, never zero), a day
without any node is a fleet gap, and coverage says how much of the period was reported.
May import: the standard library, `mlxfleet_agent.contract`, `core.kit.cost`, reports.dayagg,
reports.partials.
Called by: weekly, monthly, headline, cli.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from mlxfleet_agent import contract
from mlxfleet_operator.core.kit import cost
from mlxfleet_operator.reports import dayagg, partials

DAY_S = partials.DAY_S
THERMAL = partials.THERMAL
PARTIAL_DAY = 0.98  # a node-day below this coverage is reported as partial
Hist = partials.Hist


class TelemetrySource(Protocol):
    def day_parquet(self, day: date) -> bytes | None:
        """The day's intervals as one columnar object (`columnar.encode`), None: none."""
        ...


@dataclass(frozen=True, slots=True)
class Period:
    """`[start, end)` in whole UTC days."""

    start: date
    end: date
    label: str

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range((self.end - self.start).days)]

    @property
    def seconds(self) -> float:
        return (self.end - self.start).days * DAY_S

    @property
    def start_ts(self) -> float:
        return datetime.combine(self.start, datetime.min.time(), tzinfo=UTC).timestamp()


def words(camel: str) -> str:
    """`RolledBack` -> `rolled back` (swap outcomes in sentences)."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", camel).lower()


def iso_week(year: int, week: int) -> Period:
    start = date.fromisocalendar(year, week, 1)
    return Period(start, start + timedelta(days=7), f"{year}-W{week:02d}")


def month(year: int, month_no: int) -> Period:
    start = date(year, month_no, 1)
    end = date(year + (month_no == 12), month_no % 12 + 1, 1)
    return Period(start, end, f"{start:%B %Y}")


# ---- summaries -------------------------------------------------------------------------------


@dataclass(slots=True)
class ModelSummary:
    key: cost.ModelKey
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    busy_seconds: float = 0.0
    nodes: set[str] = field(default_factory=set)
    e2e: Hist = field(default_factory=Hist)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Outage:
    node: str
    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


@dataclass(slots=True)
class NodeSummary:
    node: str
    covered_seconds: float = 0.0
    busy_seconds: float = 0.0
    energy_wh: float = 0.0
    energy_known: bool = False
    power_sources: set[str] = field(default_factory=set)
    memory_total_bytes: int = 0
    memory_used_max: int = 0
    memory_available_min: int | None = None
    pressure_max: str = "normal"
    requests: int = 0
    tokens: int = 0
    models: set[str] = field(default_factory=set)
    day_coverage: dict[date, float] = field(default_factory=dict)
    outages: list[Outage] = field(default_factory=list)
    thermal_max: str | None = None  # the worst thermal pressure level; None: never reported
    thermal_pressure_seconds: float = 0.0  # time at serious or critical
    gpu_temperature_max: float | None = None
    cpu_temperature_max: float | None = None
    gpu_utilization_mean: float | None = None  # over the time with a reading

    @property
    def heat_known(self) -> bool:
        return (
            self.thermal_max is not None
            or self.gpu_temperature_max is not None
            or self.cpu_temperature_max is not None
        )

    def gap_days(self, period: Period) -> list[date]:
        return [d for d in period.days if self.day_coverage.get(d, 0.0) == 0.0]

    def partial_days(self, period: Period) -> list[date]:
        return [d for d in period.days if 0.0 < self.day_coverage.get(d, 0.0) < PARTIAL_DAY]

    @property
    def headroom_bytes(self) -> int | None:
        return self.memory_available_min

    @property
    def headroom_fraction(self) -> float | None:
        if self.memory_available_min is None or not self.memory_total_bytes:
            return None
        return self.memory_available_min / self.memory_total_bytes


@dataclass(frozen=True, slots=True)
class NodeSwap:
    node: str
    event: contract.SwapEvent


@dataclass(slots=True)
class PeriodSummary:
    period: Period
    nodes: dict[str, NodeSummary]
    models: dict[cost.ModelKey, ModelSummary]
    daily_tokens: dict[date, int | None]  # None: no node reported that day (a gap, not zero)
    swaps: list[NodeSwap]
    placements: set[tuple[str, str]]  # (model, node)
    presence: dict[tuple[str, str], tuple[datetime, datetime]] = field(default_factory=dict)
    fleet: cost.FleetCost | None = None
    cost_problems: list[str] = field(default_factory=list)
    unpriced_nodes: list[str] = field(default_factory=list)  # telemetry, but no cost inputs
    dropped_intervals: int = 0
    gateway: list[contract.TelemetryInterval] = field(default_factory=list)  # per-key usage

    @property
    def fleet_gap_days(self) -> list[date]:
        return [d for d, v in self.daily_tokens.items() if v is None]

    @property
    def node_gaps(self) -> list[tuple[str, date]]:
        return [(n, d) for n, s in sorted(self.nodes.items()) for d in s.gap_days(self.period)]

    @property
    def coverage(self) -> float:
        if not self.nodes:
            return 0.0
        return sum(min(s.covered_seconds, self.period.seconds) for s in self.nodes.values()) / (
            len(self.nodes) * self.period.seconds
        )

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.models.values())

    @property
    def requests(self) -> int:
        return sum(m.requests for m in self.models.values())

    @property
    def errors(self) -> int:
        return sum(m.errors for m in self.models.values())

    @property
    def outages(self) -> list[Outage]:
        return sorted((o for s in self.nodes.values() for o in s.outages), key=lambda o: o.start)

    def fleet_quantile(self, q: float) -> float | None:
        merged = Hist()
        for m in self.models.values():
            if m.e2e.count:
                merged.add(
                    contract.HistogramData(
                        bounds=list(m.e2e.bounds),
                        counts=m.e2e.counts,
                        sum=m.e2e.total,
                        count=m.e2e.count,
                    )
                )
        return merged.quantile(q)

    @property
    def swaps_clean(self) -> int:
        return sum(
            1 for s in self.swaps if s.event.outcome == "Completed" and s.event.requests_failed == 0
        )


def load(source: TelemetrySource, period: Period, *, workers: int = 2) -> partials.Partial:
    """The reduced telemetry of every day of the period (intervals starting inside it). Days
    are fetched and reduced `workers` at a time (the reading and the decoding release the GIL)
    and merged in day order, so the figures do not depend on which finished first."""

    def one(day: date) -> partials.Partial | None:
        data = source.day_parquet(day)
        return dayagg.reduce(data, start=period.start, end=period.end) if data else None

    total = partials.Partial()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(one, period.days):
            if part is not None:
                total.merge(part)
    return total


def rename(partial: partials.Partial, aliases: Mapping[str, str]) -> partials.Partial:
    """Telemetry shipped under another name counted for the node it belongs to (`aliases`)."""
    if not aliases:
        return partial
    out = partials.Partial(daily_tokens=dict(partial.daily_tokens))
    for name, part in partial.nodes.items():
        out.nodes.setdefault(aliases.get(name, name), partials.NodePart()).merge(part)
    for (node, namespace, model), mpart in partial.models.items():
        key = (aliases.get(node, node), namespace, model)
        out.models.setdefault(key, partials.ModelPart()).merge(mpart)
    out.events = [((at, st, aliases.get(n, n), seq), ev) for (at, st, n, seq), ev in partial.events]
    out.gateway = list(partial.gateway)  # gateway replicas are not nodes: no alias applies
    return out


def _outages(
    node: str, spans: list[tuple[float, float]], period: Period, *, shortest: float | None
) -> list[Outage]:
    """Holes longer than twice the interval (at least 5 minutes) between reported spans."""
    out: list[Outage] = []
    cursor = period.start_ts
    end_ts = period.start_ts + period.seconds
    typical = 60.0 if shortest is None else shortest
    threshold = max(2 * typical, 300.0)
    for s, e in [*sorted(spans), (end_ts, end_ts)]:
        if s - cursor > threshold:
            out.append(
                Outage(node, datetime.fromtimestamp(cursor, UTC), datetime.fromtimestamp(s, UTC))
            )
        cursor = max(cursor, e)
    return out


def _node_summary(ns: NodeSummary, p: partials.NodePart) -> None:
    ns.covered_seconds = p.covered_seconds
    ns.day_coverage = dict(sorted(p.day_coverage.items()))
    ns.busy_seconds = p.busy_seconds
    ns.energy_wh = p.energy_wh if p.energy_known else 0.0
    ns.energy_known = p.energy_known
    ns.power_sources = set(p.power_sources)
    ns.memory_total_bytes = p.memory_total_bytes
    ns.memory_used_max = p.memory_used_max
    ns.memory_available_min = p.memory_available_min
    ns.pressure_max = partials.PRESSURE[p.pressure]
    ns.requests = p.requests
    ns.tokens = p.tokens
    ns.models = set(p.models)
    ns.thermal_max = partials.THERMAL[p.thermal] if p.thermal >= 0 else None
    ns.thermal_pressure_seconds = p.thermal_seconds
    ns.gpu_temperature_max = p.gpu_temp_max
    ns.cpu_temperature_max = p.cpu_temp_max
    ns.gpu_utilization_mean = (
        p.gpu_busy_seconds / p.gpu_sampled_seconds if p.gpu_sampled_seconds > 0 else None
    )


def summarise(
    partial: partials.Partial,
    period: Period,
    *,
    known_nodes: Iterable[str] = (),
    namespaces: dict[str, str] | None = None,
    cost_inputs: dict[str, cost.NodeCostInputs] | None = None,
    reference: cost.ReferencePrice | None = None,
    inventory: Collection[str] = (),
) -> PeriodSummary:
    """Figures of the period; with `cost_inputs`, cost too. `inventory`: the nodes the report
    knows (InferenceNodes, report.yaml), so telemetry under any other name is named as such."""
    nodes = {n: NodeSummary(node=n) for n in known_nodes}
    for name, part in partial.nodes.items():
        _node_summary(nodes.setdefault(name, NodeSummary(node=name)), part)
    models: dict[cost.ModelKey, ModelSummary] = {}
    per_node_models: dict[str, dict[cost.ModelKey, cost.ModelUsage]] = {}
    placements: set[tuple[str, str]] = set()
    presence: dict[tuple[str, str], tuple[datetime, datetime]] = {}
    for (node, shipped_ns, model), mp in partial.models.items():
        namespace = shipped_ns or (namespaces or {}).get(model) or "default"
        key = cost.ModelKey(namespace=namespace, model=model)
        ms = models.setdefault(key, ModelSummary(key=key))
        ms.requests += mp.requests
        ms.errors += mp.errors
        ms.prompt_tokens += mp.prompt_tokens
        ms.completion_tokens += mp.completion_tokens
        ms.busy_seconds += mp.busy_seconds
        ms.nodes.add(node)
        ms.e2e.merge(mp.e2e)
        placements.add((model, node))
        if mp.first is not None and mp.last is not None:
            first, last = presence.get((model, node), (mp.first, mp.last))
            presence[(model, node)] = (min(first, mp.first), max(last, mp.last))
        usage = per_node_models.setdefault(node, {}).get(key)
        per_node_models[node][key] = cost.ModelUsage(
            key=key,
            busy_seconds=(usage.busy_seconds if usage else 0.0) + mp.busy_seconds,
            prompt_tokens=(usage.prompt_tokens if usage else 0) + mp.prompt_tokens,
            completion_tokens=(usage.completion_tokens if usage else 0) + mp.completion_tokens,
        )
    daily: dict[date, int | None] = dict.fromkeys(period.days)
    for day, tokens in partial.daily_tokens.items():
        if day in daily:
            daily[day] = tokens
    for name, ns in nodes.items():
        reported = partial.nodes.get(name)
        ns.outages = _outages(
            name,
            reported.spans if reported else [],
            period,
            shortest=reported.shortest if reported else None,
        )
    summary = PeriodSummary(
        period=period,
        nodes=dict(sorted(nodes.items())),
        models=dict(sorted(models.items())),
        daily_tokens=daily,
        swaps=[NodeSwap(k[2], ev) for k, ev in sorted(partial.events, key=lambda x: x[0])],
        placements=placements,
        presence=presence,
        dropped_intervals=sum(p.dropped for p in partial.nodes.values()),
        gateway=list(partial.gateway),
    )
    if cost_inputs is not None:
        _add_cost(summary, per_node_models, cost_inputs, reference, inventory=inventory)
    return summary


def _add_cost(
    summary: PeriodSummary,
    per_node_models: dict[str, dict[cost.ModelKey, cost.ModelUsage]],
    cost_inputs: dict[str, cost.NodeCostInputs],
    reference: cost.ReferencePrice | None,
    *,
    inventory: Collection[str],
) -> None:
    """Fleet cost of the nodes with inputs; notes naming the nodes that could not be priced
    (their inputs' own problems come from the inventory) and priced nodes that sent nothing."""
    rows: list[tuple[cost.NodeCostInputs, cost.NodeUsage]] = []
    unmatched: list[str] = []
    silent: list[str] = []
    for name, ns in summary.nodes.items():
        inputs = cost_inputs.get(name)
        if inputs is None:
            if ns.covered_seconds > 0:
                summary.unpriced_nodes.append(name)
                if name not in inventory:
                    unmatched.append(name)
            continue
        if ns.covered_seconds == 0:
            silent.append(name)
        rows.append(
            (
                inputs,
                cost.NodeUsage(
                    node=name,
                    period_hours=summary.period.seconds / 3600,
                    reported_hours=min(ns.covered_seconds, summary.period.seconds) / 3600,
                    busy_hours=ns.busy_seconds / 3600,
                    energy_kwh=ns.energy_wh / 1000 if ns.energy_known else None,
                    models=tuple(per_node_models.get(name, {}).values()),
                ),
            )
        )
    if unmatched:
        summary.cost_problems.append(
            f"No cost inputs for {', '.join(unmatched)}: telemetry under these names matches no "
            "InferenceNode or report.yaml node, so it is left out of the cost figures. Set each "
            "agent's nodeName to its InferenceNode's name, or map the name to the node under "
            "`aliases` in report.yaml."
        )
    if silent:
        summary.cost_problems.append(
            f"No telemetry this period from {', '.join(silent)}: hardware and idle power are "
            "still counted, with no tokens served."
        )
    try:
        summary.fleet = cost.fleet_cost(rows, reference=reference)
    except cost.CostInputError as exc:
        summary.cost_problems.append(str(exc))

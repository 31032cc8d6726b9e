"""Turns a period's telemetry intervals into per-model and per-node figures (and their cost).

Missing data stays missing: a node-day without intervals is a gap (listed, never zero), a day
without any node is a fleet gap, and coverage says how much of the period was reported.
May import: the standard library, `mlxfleet_agent.contract`, `core.cost`. Called by: weekly,
monthly, cli.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from mlxfleet_agent import contract
from mlxfleet_operator.core import cost

DAY_S = 86_400.0
PARTIAL_DAY = 0.98  # a node-day below this coverage is reported as partial


class TelemetrySource(Protocol):
    def intervals_for_day(self, day: date) -> list[contract.TelemetryInterval]: ...


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


# ---- histograms ------------------------------------------------------------------------------


@dataclass(slots=True)
class Hist:
    bounds: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0

    def add(self, data: contract.HistogramData | None) -> None:
        if data is None or data.count == 0:
            return
        if not self.bounds:
            self.bounds, self.counts = tuple(data.bounds), [0] * len(data.counts)
        if tuple(data.bounds) != self.bounds:
            raise ValueError("histograms with different buckets cannot be merged")
        self.counts = [a + b for a, b in zip(self.counts, data.counts, strict=True)]
        self.count += data.count
        self.total += data.sum

    def quantile(self, q: float) -> float | None:
        """Prometheus-style: linear interpolation inside the bucket holding rank q x count."""
        if self.count == 0:
            return None
        rank = q * self.count
        cumulative = 0
        for i, n in enumerate(self.counts):
            if n and cumulative + n >= rank:
                if i >= len(self.bounds):
                    return self.bounds[-1]  # +Inf bucket: the largest finite bound
                lower = self.bounds[i - 1] if i > 0 else 0.0
                return lower + (self.bounds[i] - lower) * (rank - cumulative) / n
            cumulative += n
        return self.bounds[-1]


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
    ttft: Hist = field(default_factory=Hist)

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


def load(source: TelemetrySource, period: Period) -> list[contract.TelemetryInterval]:
    """All intervals of the period, one per (node, start) even if stored twice."""
    seen: dict[tuple[str, float], contract.TelemetryInterval] = {}
    for day in period.days:
        for iv in source.intervals_for_day(day):
            seen[(iv.node, iv.interval_start.timestamp())] = iv
    return [seen[k] for k in sorted(seen, key=lambda k: (k[1], k[0]))]


def rename(
    intervals: Iterable[contract.TelemetryInterval], aliases: Mapping[str, str]
) -> list[contract.TelemetryInterval]:
    """Telemetry shipped under another name counted for the node it belongs to (`aliases`)."""
    return [
        iv.model_copy(update={"node": aliases[iv.node]}) if iv.node in aliases else iv
        for iv in intervals
    ]


def _outages(node: str, spans: list[tuple[float, float]], period: Period) -> list[Outage]:
    """Holes longer than twice the interval (at least 5 minutes) between reported spans."""
    out: list[Outage] = []
    cursor = period.start_ts
    end_ts = period.start_ts + period.seconds
    typical = min((e - s for s, e in spans), default=60.0)
    threshold = max(2 * typical, 300.0)
    for s, e in [*sorted(spans), (end_ts, end_ts)]:
        if s - cursor > threshold:
            out.append(
                Outage(node, datetime.fromtimestamp(cursor, UTC), datetime.fromtimestamp(s, UTC))
            )
        cursor = max(cursor, e)
    return out


def summarise(
    intervals: Iterable[contract.TelemetryInterval],
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
    models: dict[cost.ModelKey, ModelSummary] = {}
    per_node_models: dict[str, dict[cost.ModelKey, cost.ModelUsage]] = {}
    daily: dict[date, int | None] = dict.fromkeys(period.days)
    spans: dict[str, list[tuple[float, float]]] = {}
    swaps: list[NodeSwap] = []
    placements: set[tuple[str, str]] = set()
    presence: dict[tuple[str, str], tuple[datetime, datetime]] = {}
    dropped = 0
    gateway: list[contract.TelemetryInterval] = []
    for iv in intervals:
        start = iv.interval_start.astimezone(UTC)
        day = start.date()
        if day not in daily:
            continue
        if iv.component == "gateway":  # per-key usage (reports.teams); not a node
            gateway.append(iv)
            continue
        ns = nodes.setdefault(iv.node, NodeSummary(node=iv.node))
        t0 = start.timestamp()
        spans.setdefault(iv.node, []).append((t0, t0 + iv.interval_seconds))
        ns.covered_seconds += iv.interval_seconds
        ns.day_coverage[day] = ns.day_coverage.get(day, 0.0) + iv.interval_seconds / DAY_S
        h = iv.host
        ns.busy_seconds += h.busy_seconds
        if h.power_source != "unknown":
            ns.energy_wh += h.energy_wh
            ns.energy_known = True
            ns.power_sources.add(h.power_source)
        ns.memory_total_bytes = max(ns.memory_total_bytes, h.memory_total_bytes)
        ns.memory_used_max = max(ns.memory_used_max, h.memory_used_bytes_max)
        if h.memory_available_bytes_min:
            ns.memory_available_min = min(
                ns.memory_available_min or h.memory_available_bytes_min,
                h.memory_available_bytes_min,
            )
        order = ("normal", "warn", "critical")
        if order.index(h.memory_pressure_max) > order.index(ns.pressure_max):
            ns.pressure_max = h.memory_pressure_max
        dropped += iv.dropped_intervals
        day_tokens = daily[day] or 0
        for s in iv.slots:
            namespace = s.namespace or (namespaces or {}).get(s.model) or "default"
            key = cost.ModelKey(namespace=namespace, model=s.model)
            ms = models.setdefault(key, ModelSummary(key=key))
            ms.requests += s.requests
            ms.errors += sum(s.errors.values())
            ms.prompt_tokens += s.prompt_tokens
            ms.completion_tokens += s.completion_tokens
            ms.busy_seconds += s.busy_seconds
            ms.nodes.add(iv.node)
            ms.e2e.add(s.end_to_end_seconds)
            ms.ttft.add(s.ttft_seconds)
            ns.requests += s.requests
            ns.tokens += s.prompt_tokens + s.completion_tokens
            ns.models.add(s.model)
            placements.add((s.model, iv.node))
            end = start + timedelta(seconds=iv.interval_seconds)
            first, last = presence.get((s.model, iv.node), (start, end))
            presence[(s.model, iv.node)] = (min(first, start), max(last, end))
            day_tokens += s.prompt_tokens + s.completion_tokens
            usage = per_node_models.setdefault(iv.node, {}).get(key)
            per_node_models[iv.node][key] = cost.ModelUsage(
                key=key,
                busy_seconds=(usage.busy_seconds if usage else 0.0) + s.busy_seconds,
                prompt_tokens=(usage.prompt_tokens if usage else 0) + s.prompt_tokens,
                completion_tokens=(usage.completion_tokens if usage else 0) + s.completion_tokens,
            )
        daily[day] = day_tokens
        swaps.extend(NodeSwap(iv.node, ev) for ev in iv.swap_events)
    for name, ns in nodes.items():
        ns.outages = _outages(name, spans.get(name, []), period)
    summary = PeriodSummary(
        period=period,
        nodes=dict(sorted(nodes.items())),
        models=dict(sorted(models.items())),
        daily_tokens=daily,
        swaps=sorted(swaps, key=lambda s: s.event.at),
        placements=placements,
        presence=presence,
        dropped_intervals=dropped,
        gateway=gateway,
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

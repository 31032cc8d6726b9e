"""The weekly placement and cost diff: this ISO week against the previous one.

Builds plain rows from two `summary.PeriodSummary` values (what moved where and why, swaps,
outages, memory headroom, hot spots, tokens, latency, cost per million tokens, week-over-week
change);
`render.weekly_markdown/html` turn them into the two report files.
May import: the standard library, `core.kit.cost`, reports.summary. Called by: cli.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from mlxfleet_operator.reports import summary

EDGE = timedelta(hours=1)  # presence this close to the week's edge counts as "all week"


def change(now: float | None, before: float | None) -> float | None:
    """Relative change (0.12 = +12 %); None when either side is unknown or before is zero."""
    if now is None or before is None or before == 0:
        return None
    return (now - before) / before


@dataclass(frozen=True, slots=True)
class Figure:
    label: str
    now: float | None
    before: float | None
    kind: str  # tokens | count | usd | usd_m | seconds | pct | ratio

    @property
    def change(self) -> float | None:
        return change(self.now, self.before)


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    namespace: str
    nodes: str
    tokens: int
    tokens_before: int | None
    requests: int
    error_rate: float | None
    p50: float | None
    p95: float | None
    p95_before: float | None
    cpm: float | None
    cpm_before: float | None

    @property
    def tokens_change(self) -> float | None:
        return change(self.tokens, self.tokens_before)

    @property
    def cpm_change(self) -> float | None:
        return change(self.cpm, self.cpm_before)


@dataclass(frozen=True, slots=True)
class Move:
    model: str
    node: str
    change: str  # "added" | "removed"
    when: datetime | None
    why: str


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    models: str
    coverage: float
    memory_total: int
    memory_peak: int
    headroom: int | None
    headroom_before: int | None
    pressure: str
    cost: float | None
    cost_per_million: float | None
    gaps: str


@dataclass(frozen=True, slots=True)
class HotSpot:
    """A node that ran hot: time under thermal pressure (serious or critical) and its peaks."""

    node: str
    pressure_hours: float
    pressure_share: float | None  # of the time it reported
    worst: str  # the worst thermal pressure level, or "-" when only temperatures are known
    gpu_temperature_max: float | None
    cpu_temperature_max: float | None
    gpu_utilization_mean: float | None
    pressure_hours_before: float | None  # last week (None: no heat reported then)


HOT_SPOTS = 10  # rows of the hot-spot table


def hot_spots(this: summary.PeriodSummary, previous: summary.PeriodSummary) -> list[HotSpot]:
    """Nodes that spent time under thermal pressure or reached the highest temperatures, the
    hottest first: time under pressure, then the worst level, then the highest temperature.
    Nodes that reported no heat at all are left out (no figure, never a zero)."""
    rows = []
    for name, ns in this.nodes.items():
        if not ns.heat_known:
            continue
        before = previous.nodes.get(name)
        rows.append(
            HotSpot(
                node=name,
                pressure_hours=ns.thermal_pressure_seconds / 3600,
                pressure_share=(
                    min(1.0, ns.thermal_pressure_seconds / ns.covered_seconds)
                    if ns.covered_seconds
                    else None
                ),
                worst=ns.thermal_max or "-",
                gpu_temperature_max=ns.gpu_temperature_max,
                cpu_temperature_max=ns.cpu_temperature_max,
                gpu_utilization_mean=ns.gpu_utilization_mean,
                pressure_hours_before=(
                    before.thermal_pressure_seconds / 3600
                    if before is not None and before.heat_known
                    else None
                ),
            )
        )
    levels = ("-", *summary.THERMAL)
    rows.sort(
        key=lambda h: (
            -h.pressure_hours,
            -levels.index(h.worst),
            -max(h.gpu_temperature_max or -1e9, h.cpu_temperature_max or -1e9),
            h.node,
        )
    )
    return rows[:HOT_SPOTS]


@dataclass(slots=True)
class WeeklyReport:
    this: summary.PeriodSummary
    previous: summary.PeriodSummary
    headline: list[Figure] = field(default_factory=list)
    models: list[ModelRow] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    hot_spots: list[HotSpot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _cpm(s: summary.PeriodSummary, model: str, namespace: str) -> float | None:
    if s.fleet is None:
        return None
    for mc in s.fleet.models:
        if mc.key.model == model and mc.key.namespace == namespace:
            return mc.cost_per_million
    return None


def _why(
    model: str, node: str, kind: str, when: datetime | None, this: summary.PeriodSummary
) -> str:
    if when is not None:
        for o in this.outages:
            if (
                o.node != node
                and (model, o.node) in this.placements
                and o.start - EDGE <= when <= o.end + EDGE
            ):
                verb = "failover from" if kind == "added" else "failback to"
                return (
                    f"{verb} {o.node} (down {o.start:%a %d %b %H:%M} to {o.end:%a %d %b %H:%M} UTC)"
                )
        for o in this.outages:
            if o.node == node and o.start - EDGE <= when <= o.end + EDGE:
                return f"{node} went down {o.start:%a %d %b %H:%M} UTC"
        for sw in this.swaps:
            if sw.node == node and abs(sw.event.at - when) <= EDGE:
                return f"swap {summary.words(sw.event.outcome)} ({sw.event.strategy or 'auto'})"
    return "placement change (no outage or swap recorded)"


def _moves(this: summary.PeriodSummary, previous: summary.PeriodSummary) -> list[Move]:
    start = datetime.fromtimestamp(this.period.start_ts, tz=UTC)
    end = start + timedelta(seconds=this.period.seconds)
    moves: list[Move] = []
    for model, node in sorted(this.placements | previous.placements):
        first_last = this.presence.get((model, node))
        before = (model, node) in previous.placements
        if first_last is None:
            moves.append(
                Move(model, node, "removed", None, _why(model, node, "removed", None, this))
            )
            continue
        first, last = first_last
        if not before or first - start > EDGE:
            moves.append(Move(model, node, "added", first, _why(model, node, "added", first, this)))
        if end - last > EDGE and not _node_gap_at_end(this, node, last):
            moves.append(
                Move(model, node, "removed", last, _why(model, node, "removed", last, this))
            )
    return moves


def _node_gap_at_end(this: summary.PeriodSummary, node: str, last: datetime) -> bool:
    """The model vanished because the node stopped reporting, not because it moved."""
    return any(o.node == node and abs(o.start - last) <= EDGE for o in this.outages)


def build(this: summary.PeriodSummary, previous: summary.PeriodSummary) -> WeeklyReport:
    report = WeeklyReport(this=this, previous=previous)
    tf, pf = this.fleet, previous.fleet
    report.headline = [
        Figure("Tokens served", this.tokens, previous.tokens, "tokens"),
        Figure("Requests", this.requests, previous.requests, "count"),
        Figure(
            "Error rate",
            this.errors / this.requests if this.requests else None,
            previous.errors / previous.requests if previous.requests else None,
            "pct",
        ),
        Figure("p50 latency", this.fleet_quantile(0.5), previous.fleet_quantile(0.5), "seconds"),
        Figure("p95 latency", this.fleet_quantile(0.95), previous.fleet_quantile(0.95), "seconds"),
        Figure("Fleet cost", tf.total_usd if tf else None, pf.total_usd if pf else None, "usd"),
        Figure(
            "Idle capacity cost", tf.idle_usd if tf else None, pf.idle_usd if pf else None, "usd"
        ),
        Figure(
            "Cost per million tokens (all-in)",
            tf.loaded_cost_per_million if tf else None,
            pf.loaded_cost_per_million if pf else None,
            "usd_m",
        ),
        Figure("Telemetry coverage", this.coverage, previous.coverage, "pct"),
    ]
    for key, m in this.models.items():
        prev = previous.models.get(key)
        report.models.append(
            ModelRow(
                model=key.model,
                namespace=key.namespace,
                nodes=", ".join(sorted(m.nodes)),
                tokens=m.tokens,
                tokens_before=prev.tokens if prev else None,
                requests=m.requests,
                error_rate=m.errors / m.requests if m.requests else None,
                p50=m.e2e.quantile(0.5),
                p95=m.e2e.quantile(0.95),
                p95_before=prev.e2e.quantile(0.95) if prev else None,
                cpm=_cpm(this, key.model, key.namespace),
                cpm_before=_cpm(previous, key.model, key.namespace),
            )
        )
    node_costs = {n.node: n for n in tf.nodes} if tf else {}
    for name, ns in this.nodes.items():
        nc = node_costs.get(name)
        prev_ns = previous.nodes.get(name)
        gaps = ns.gap_days(this.period)
        report.nodes.append(
            NodeRow(
                node=name,
                models=", ".join(sorted(ns.models)) or "-",
                coverage=min(1.0, ns.covered_seconds / this.period.seconds),
                memory_total=ns.memory_total_bytes,
                memory_peak=ns.memory_used_max,
                headroom=ns.headroom_bytes,
                headroom_before=prev_ns.headroom_bytes if prev_ns else None,
                pressure=ns.pressure_max,
                cost=nc.total_usd if nc else None,
                cost_per_million=nc.cost_per_million if nc else None,
                gaps=", ".join(f"{d:%a %d %b}" for d in gaps) or "none",
            )
        )
    report.moves = _moves(this, previous)
    report.hot_spots = hot_spots(this, previous)
    if this.fleet_gap_days:
        days = ", ".join(f"{d:%a %d %b}" for d in this.fleet_gap_days)
        report.notes.append(f"No telemetry from any node on {days}: figures exclude those days.")
    if previous.fleet_gap_days or previous.coverage < 0.99:
        report.notes.append(
            f"Last week's telemetry covers {previous.coverage:.0%} of node-hours: "
            "week-over-week changes compare partial data."
        )
    if this.dropped_intervals:
        report.notes.append(
            f"Agents dropped {this.dropped_intervals} buffered intervals (disk buffer full)."
        )
    report.notes += this.cost_problems
    return report

"""What a report keeps of some telemetry: sums, extremes and sets per node and per model,
merged across row groups and days (reports.dayagg computes them, reports.summary turns
them into figures).

Keys are the node names agents shipped under (aliases are applied later) and the namespace as
shipped (resolved later), so merging is plain addition, max/min and set union.
May import: the standard library, `mlxfleet_agent.contract`. Called by: reports.dayagg,
reports.summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime

from mlxfleet_agent import contract

DAY_S = 86_400.0
PRESSURE = ("normal", "warn", "critical")
THERMAL = contract.THERMAL_LEVELS


@dataclass(slots=True)
class Hist:
    """A merged fixed-bucket histogram (`counts[i]` <= `bounds[i]`, the last above all)."""

    bounds: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0

    def add(self, data: contract.HistogramData | None) -> None:
        if data is None or data.count == 0:
            return
        self.merge(Hist(tuple(data.bounds), list(data.counts), data.count, data.sum))

    def merge(self, other: Hist) -> None:
        if other.count == 0:
            return
        if not self.bounds and not self.counts:
            self.bounds, self.counts = other.bounds, [0] * len(other.counts)
        if other.bounds != self.bounds:
            raise ValueError("histograms with different buckets cannot be merged")
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.count += other.count
        self.total += other.total

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


@dataclass(slots=True)
class NodePart:
    covered_seconds: float = 0.0
    day_coverage: dict[date, float] = field(default_factory=dict)
    busy_seconds: float = 0.0
    energy_wh: float = 0.0
    energy_known: bool = False
    power_sources: set[str] = field(default_factory=set)
    memory_total_bytes: int = 0
    memory_used_max: int = 0
    memory_available_min: int | None = None
    pressure: int = 0  # index into PRESSURE
    requests: int = 0
    tokens: int = 0
    models: set[str] = field(default_factory=set)
    spans: list[tuple[float, float]] = field(default_factory=list)  # coalesced, sorted
    shortest: float | None = None  # shortest reported span (end - start), for outages
    dropped: int = 0
    thermal: int = -1  # index into THERMAL of the worst level; -1: never reported
    thermal_seconds: float = 0.0  # at thermal pressure serious or critical
    gpu_temp_max: float | None = None
    cpu_temp_max: float | None = None
    gpu_busy_seconds: float = 0.0
    gpu_sampled_seconds: float = 0.0

    def merge(self, o: NodePart) -> None:
        self.covered_seconds += o.covered_seconds
        for d, v in o.day_coverage.items():
            self.day_coverage[d] = self.day_coverage.get(d, 0.0) + v
        self.busy_seconds += o.busy_seconds
        self.energy_wh += o.energy_wh
        self.energy_known |= o.energy_known
        self.power_sources |= o.power_sources
        self.memory_total_bytes = max(self.memory_total_bytes, o.memory_total_bytes)
        self.memory_used_max = max(self.memory_used_max, o.memory_used_max)
        if o.memory_available_min is not None:
            self.memory_available_min = min(
                self.memory_available_min or o.memory_available_min, o.memory_available_min
            )
        self.pressure = max(self.pressure, o.pressure)
        self.requests += o.requests
        self.tokens += o.tokens
        self.models |= o.models
        self.spans = coalesce([*self.spans, *o.spans])
        if o.shortest is not None:
            self.shortest = o.shortest if self.shortest is None else min(self.shortest, o.shortest)
        self.dropped += o.dropped
        self.merge_heat(o)

    def merge_heat(self, o: NodePart) -> None:
        """The heat figures of `o` folded in (worst level, hottest, summed times)."""
        self.thermal = max(self.thermal, o.thermal)
        self.thermal_seconds += o.thermal_seconds
        self.gpu_temp_max = _hottest(self.gpu_temp_max, o.gpu_temp_max)
        self.cpu_temp_max = _hottest(self.cpu_temp_max, o.cpu_temp_max)
        self.gpu_busy_seconds += o.gpu_busy_seconds
        self.gpu_sampled_seconds += o.gpu_sampled_seconds


def _hottest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(slots=True)
class ModelPart:
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    busy_seconds: float = 0.0
    e2e: Hist = field(default_factory=Hist)  # end to end; the only latency the reports show
    first: datetime | None = None
    last: datetime | None = None

    def merge(self, o: ModelPart) -> None:
        self.requests += o.requests
        self.errors += o.errors
        self.prompt_tokens += o.prompt_tokens
        self.completion_tokens += o.completion_tokens
        self.busy_seconds += o.busy_seconds
        self.e2e.merge(o.e2e)
        if o.first is not None:
            self.first = o.first if self.first is None else min(self.first, o.first)
        if o.last is not None:
            self.last = o.last if self.last is None else max(self.last, o.last)


ModelKey = tuple[str, str | None, str]  # (node, namespace as shipped, model)
EventKey = tuple[datetime, datetime, str, int]  # (at, interval start, node, seq): report order


@dataclass(slots=True)
class Partial:
    """Figures of some rows of telemetry, keyed by the node name the agent shipped under."""

    nodes: dict[str, NodePart] = field(default_factory=dict)
    models: dict[ModelKey, ModelPart] = field(default_factory=dict)
    daily_tokens: dict[date, int] = field(default_factory=dict)  # days with any interval
    events: list[tuple[EventKey, contract.SwapEvent]] = field(default_factory=list)
    # the gateway's per-key intervals (`component: gateway`; reports.teams), kept whole
    gateway: list[contract.TelemetryInterval] = field(default_factory=list)

    def merge(self, o: Partial) -> None:
        for name, part in o.nodes.items():
            self.nodes.setdefault(name, NodePart()).merge(part)
        for key, mpart in o.models.items():
            self.models.setdefault(key, ModelPart()).merge(mpart)
        for d, v in o.daily_tokens.items():
            self.daily_tokens[d] = self.daily_tokens.get(d, 0) + v
        self.events += o.events
        self.gateway += o.gateway


def coalesce(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted spans with overlapping or touching ones joined (outages are found the same)."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out

"""Aggregates of one telemetry interval: what gets shipped as one `TelemetryInterval` line.

Pure bookkeeping over explicit timestamps (seconds since the epoch): no clock, no I/O, no locks
(the caller, `telemetry.Telemetry`, serialises access). An open interval can be snapshotted to a
`TelemetryInterval` and restored from one, which is how an agent restart keeps its counts.
May import: the standard library and contract. Called by: telemetry (recorder, hoststats,
shipper).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import UTC, datetime

from mlxfleet_agent import contract

PRESSURE_ORDER = ("normal", "warn", "critical")
THERMAL_ORDER = contract.THERMAL_LEVELS
HOT = ("serious", "critical")  # thermal pressure that keeps new replicas off the node
METERS = ("powermetrics", "macmon", "rapl", "nvidia-smi")


@dataclass(slots=True)
class Histogram:
    """Fixed-bucket histogram; `counts` has one more entry than `bounds` (the +Inf bucket)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def merge(self, data: contract.HistogramData | None) -> None:
        if data is None or data.count == 0:
            return
        if tuple(data.bounds) != self.bounds or len(data.counts) != len(self.counts):
            raise ValueError("cannot merge histograms with different buckets")
        self.counts = [a + b for a, b in zip(self.counts, data.counts, strict=True)]
        self.total += data.sum
        self.count += data.count

    def to_wire(self) -> contract.HistogramData:
        return contract.HistogramData(
            bounds=list(self.bounds), counts=list(self.counts), sum=self.total, count=self.count
        )


def _latency() -> Histogram:
    return Histogram(contract.LATENCY_BUCKETS_S)


def _token_latency() -> Histogram:
    return Histogram(contract.TOKEN_LATENCY_BUCKETS_S)


@dataclass(slots=True)
class SlotAggregate:
    slot: str
    model: str
    source: str | None = None
    namespace: str | None = None
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    busy_seconds: float = 0.0
    max_in_flight: int = 0
    ttft: Histogram = field(default_factory=_latency)
    tpot: Histogram = field(default_factory=_token_latency)
    e2e: Histogram = field(default_factory=_latency)
    queue_wait: Histogram = field(default_factory=_latency)
    swaps: dict[str, int] = field(default_factory=dict)

    def to_wire(self) -> contract.SlotTelemetry:
        return contract.SlotTelemetry(
            slot=self.slot,
            model=self.model,
            source=self.source,
            namespace=self.namespace,
            requests=self.requests,
            errors=dict(self.errors),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            busy_seconds=round(self.busy_seconds, 6),
            max_in_flight=self.max_in_flight,
            ttft_seconds=self.ttft.to_wire(),
            time_per_output_token_seconds=self.tpot.to_wire(),
            end_to_end_seconds=self.e2e.to_wire(),
            queue_wait_seconds=self.queue_wait.to_wire(),
            swaps=dict(self.swaps),
        )

    def merge(self, wire: contract.SlotTelemetry) -> None:
        self.requests += wire.requests
        for kind, n in wire.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.prompt_tokens += wire.prompt_tokens
        self.completion_tokens += wire.completion_tokens
        self.busy_seconds += wire.busy_seconds
        self.max_in_flight = max(self.max_in_flight, wire.max_in_flight)
        self.ttft.merge(wire.ttft_seconds)
        self.tpot.merge(wire.time_per_output_token_seconds)
        self.e2e.merge(wire.end_to_end_seconds)
        self.queue_wait.merge(wire.queue_wait_seconds)
        for outcome, n in wire.swaps.items():
            self.swaps[outcome] = self.swaps.get(outcome, 0) + n


@dataclass(frozen=True, slots=True)
class HostSample:
    """One reading of the host, taken by the shipper every few seconds."""

    memory_total_bytes: int
    memory_used_bytes: int
    memory_available_bytes: int
    pressure: str  # one of PRESSURE_ORDER
    power_watts: float | None = None  # measured (a meter); None -> estimated from busy time
    power_source: str | None = None  # the meter: powermetrics, macmon, rapl, nvidia-smi
    thermal: str | None = None  # one of THERMAL_ORDER; None: no source tells
    thermal_reason: str | None = None
    gpu_utilization: float | None = None  # 0 to 1
    gpu_temperature_c: float | None = None
    cpu_temperature_c: float | None = None


@dataclass(slots=True)
class IntervalAggregate:
    """Everything one node contributes to one interval `[start, start + seconds)`."""

    node: str
    start: float
    seconds: float
    agent_started_at: float | None = None
    slots: dict[tuple[str, str], SlotAggregate] = field(default_factory=dict)
    node_busy_seconds: float = 0.0
    memory_total_bytes: int = 0
    memory_used_max: int = 0
    memory_available_min: int | None = None
    pressure_max: str = "normal"
    measured_wh: float = 0.0
    measured_seconds: float = 0.0
    meter: str = "powermetrics"  # the last meter that measured power in this interval
    thermal_max: str | None = None
    thermal_seconds: float = 0.0  # at serious or critical
    gpu_temp_max: float | None = None
    cpu_temp_max: float | None = None
    gpu_busy_seconds: float = 0.0
    gpu_sampled_seconds: float = 0.0
    swap_events: list[contract.SwapEvent] = field(default_factory=list)
    dropped_intervals: int = 0

    @property
    def end(self) -> float:
        return self.start + self.seconds

    def slot(self, slot: str, model: str) -> SlotAggregate:
        key = (slot, model)
        agg = self.slots.get(key)
        if agg is None:
            agg = self.slots[key] = SlotAggregate(slot=slot, model=model)
        return agg

    def add_host_sample(self, sample: HostSample, *, elapsed_s: float) -> None:
        self.memory_total_bytes = max(self.memory_total_bytes, sample.memory_total_bytes)
        self.memory_used_max = max(self.memory_used_max, sample.memory_used_bytes)
        if self.memory_available_min is None:
            self.memory_available_min = sample.memory_available_bytes
        else:
            self.memory_available_min = min(
                self.memory_available_min, sample.memory_available_bytes
            )
        if PRESSURE_ORDER.index(sample.pressure) > PRESSURE_ORDER.index(self.pressure_max):
            self.pressure_max = sample.pressure
        if sample.power_watts is not None and elapsed_s > 0:
            self.measured_wh += sample.power_watts * elapsed_s / 3600.0
            self.measured_seconds += elapsed_s
            if sample.power_source in METERS:
                self.meter = sample.power_source
        self._add_heat(sample, elapsed_s=elapsed_s)

    def _add_heat(self, sample: HostSample, *, elapsed_s: float) -> None:
        """Worst thermal level, time under pressure (the time since the previous sample counts
        at this sample's level), hottest temperatures, GPU busy time."""
        if sample.thermal in THERMAL_ORDER:
            if _rank(sample.thermal) > _rank(self.thermal_max):
                self.thermal_max = sample.thermal
            if sample.thermal in HOT and elapsed_s > 0:
                self.thermal_seconds += elapsed_s
        self.gpu_temp_max = _hottest(self.gpu_temp_max, sample.gpu_temperature_c)
        self.cpu_temp_max = _hottest(self.cpu_temp_max, sample.cpu_temperature_c)
        if sample.gpu_utilization is not None and elapsed_s > 0:
            self.gpu_busy_seconds += sample.gpu_utilization * elapsed_s
            self.gpu_sampled_seconds += elapsed_s

    def to_wire(
        self, *, now: float, idle_watts: float | None, busy_watts: float | None
    ) -> contract.TelemetryInterval:
        """Snapshot; energy is measured when power samples cover the interval, else estimated."""
        covered = max(0.0, min(now, self.end) - self.start)
        busy = min(self.node_busy_seconds, covered) if covered else self.node_busy_seconds
        source: str = "unknown"
        energy_wh = 0.0
        if self.measured_seconds > 0 and self.measured_seconds >= 0.5 * covered:
            source = self.meter
            energy_wh = self.measured_wh * (covered / self.measured_seconds)
        elif idle_watts is not None and busy_watts is not None:
            source = "estimated"
            energy_wh = (idle_watts * (covered - busy) + busy_watts * busy) / 3600.0
        started = (
            datetime.fromtimestamp(self.agent_started_at, tz=UTC)
            if self.agent_started_at is not None
            else None
        )
        uptime = (
            max(0.0, min(now, self.end) - self.agent_started_at)
            if self.agent_started_at is not None
            else 0.0
        )
        return contract.TelemetryInterval(
            node=self.node,
            interval_start=datetime.fromtimestamp(self.start, tz=UTC),
            interval_seconds=self.seconds,
            agent_started_at=started,
            slots=[agg.to_wire() for _, agg in sorted(self.slots.items())],
            host=contract.NodeTelemetry(
                memory_total_bytes=self.memory_total_bytes,
                memory_used_bytes_max=self.memory_used_max,
                memory_available_bytes_min=self.memory_available_min or 0,
                memory_pressure_max=self.pressure_max,
                uptime_seconds=round(uptime, 3),
                busy_seconds=round(busy, 6),
                energy_wh=round(energy_wh, 6),
                average_power_watts=round(energy_wh * 3600.0 / covered, 3) if covered else 0.0,
                power_source=source,
                thermal_pressure_max=self.thermal_max,
                thermal_pressure_seconds=round(self.thermal_seconds, 3),
                gpu_temperature_max_celsius=self.gpu_temp_max,
                cpu_temperature_max_celsius=self.cpu_temp_max,
                gpu_busy_seconds=round(self.gpu_busy_seconds, 3),
                gpu_sampled_seconds=round(self.gpu_sampled_seconds, 3),
            ),
            swap_events=list(self.swap_events),
            dropped_intervals=self.dropped_intervals,
        )

    def restore(self, wire: contract.TelemetryInterval) -> None:
        """Merge a checkpoint of this same interval (written before an agent restart)."""
        if wire.node != self.node or wire.interval_start.timestamp() != self.start:
            raise ValueError("checkpoint belongs to another interval")
        for s in wire.slots:
            agg = self.slot(s.slot, s.model)
            agg.source = agg.source or s.source
            agg.namespace = agg.namespace or s.namespace
            agg.merge(s)
        self.node_busy_seconds += wire.host.busy_seconds
        self.memory_total_bytes = max(self.memory_total_bytes, wire.host.memory_total_bytes)
        self.memory_used_max = max(self.memory_used_max, wire.host.memory_used_bytes_max)
        if wire.host.memory_available_bytes_min:
            self.memory_available_min = min(
                self.memory_available_min or wire.host.memory_available_bytes_min,
                wire.host.memory_available_bytes_min,
            )
        if PRESSURE_ORDER.index(wire.host.memory_pressure_max) > PRESSURE_ORDER.index(
            self.pressure_max
        ):
            self.pressure_max = wire.host.memory_pressure_max
        if wire.host.power_source in METERS:
            self.meter = wire.host.power_source
            self.measured_wh += wire.host.energy_wh
            self.measured_seconds += wire.host.energy_wh and (
                wire.host.energy_wh * 3600.0 / max(wire.host.average_power_watts, 1e-9)
            )
        if _rank(wire.host.thermal_pressure_max) > _rank(self.thermal_max):
            self.thermal_max = wire.host.thermal_pressure_max
        self.thermal_seconds += wire.host.thermal_pressure_seconds
        self.gpu_temp_max = _hottest(self.gpu_temp_max, wire.host.gpu_temperature_max_celsius)
        self.cpu_temp_max = _hottest(self.cpu_temp_max, wire.host.cpu_temperature_max_celsius)
        self.gpu_busy_seconds += wire.host.gpu_busy_seconds
        self.gpu_sampled_seconds += wire.host.gpu_sampled_seconds
        self.swap_events = [*wire.swap_events, *self.swap_events]
        self.dropped_intervals += wire.dropped_intervals
        if wire.agent_started_at is not None and self.agent_started_at is None:
            self.agent_started_at = wire.agent_started_at.timestamp()


def _rank(level: str | None) -> int:
    return THERMAL_ORDER.index(level) if level in THERMAL_ORDER else -1


def _hottest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)

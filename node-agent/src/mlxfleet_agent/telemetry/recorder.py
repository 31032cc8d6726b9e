"""Per-slot request and swap telemetry of the agent (seam between the data plane and telemetry).

The data plane calls `Telemetry.request_started(slot)` and `request_finished(RequestRecord)` once
per request, the slots `swap_finished(slot=, outcome=)` once per swap and `observe_slot` when a
slot serves a model. Behind those calls: Prometheus metrics (`metrics.AgentMetrics`, served at
`/metrics`) and the open telemetry interval (`intervals.IntervalAggregate`) that the shipper
closes every 60 s and uploads. Never receives prompt or completion text: only counts and timings.
May import: the standard library, contract, telemetry (intervals, metrics). Called by: dataplane,
slots, controlapi (counters, /metrics), telemetry.shipper, runtime.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import intervals, metrics


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one finished data-plane request contributes. No request text, ever."""

    slot: str
    served_name: str
    source: str
    endpoint: str  # "chat.completions" | "completions"
    stream: bool
    prompt_tokens: int
    completion_tokens: int
    queue_wait_s: float
    ttft_s: float | None  # time to first token (streams) or to the full answer
    e2e_s: float
    error_kind: str | None = None  # None on success; e.g. "backend_5xx", "backend_died", "timeout"


def time_per_output_token(record: RequestRecord) -> float | None:
    """Decode seconds per token after the first; None when it cannot be measured."""
    if not record.stream or record.ttft_s is None or record.completion_tokens < 2:
        return None
    return max(0.0, record.e2e_s - record.ttft_s) / (record.completion_tokens - 1)


def window_start(now: float, seconds: float) -> float:
    """Start of the aligned interval containing `now` (epoch seconds)."""
    return math.floor(now / seconds) * seconds


class Telemetry:
    """Thread-safe aggregates: cumulative (Prometheus) and per interval (shipped to S3)."""

    def __init__(
        self,
        *,
        node: str = "local",
        interval_seconds: float = 60.0,
        idle_watts: float | None = None,
        busy_watts: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._counters: dict[str, float] = defaultdict(float)
        self.node = node
        self.interval_seconds = interval_seconds
        self.idle_watts = idle_watts
        self.busy_watts = busy_watts
        self.started_at = clock()
        self.metrics = metrics.AgentMetrics()
        self._in_flight: dict[str, int] = defaultdict(int)
        self._busy_since: dict[str, float] = {}
        self._node_busy_since: float | None = None
        self._slot_model: dict[str, tuple[str, str | None, str | None]] = {}
        self._pending_busy: dict[str, float] = {}  # busy time of slots whose model is not known yet
        self._last_host: intervals.HostSample | None = None
        self._series: dict[tuple[str, str, str, bool, str], tuple[Any, ...]] = {}
        self._last_host_at: float | None = None
        now = self.started_at
        self._open = self._new_interval(now)
        self.metrics.add_host_collector(self.host_view)

    # ---- data plane seam (stable) ------------------------------------------------------------

    def request_started(self, slot: str) -> None:
        with self._lock:
            now = self._clock()
            self._fold_busy(now)
            self._in_flight[slot] += 1
            self._busy_since.setdefault(slot, now)
            if self._node_busy_since is None:
                self._node_busy_since = now
            known = self._slot_model.get(slot)
            if known is not None:
                agg = self._open.slot(slot, known[0])
                agg.max_in_flight = max(agg.max_in_flight, self._in_flight[slot])
            self.metrics.child(self.metrics.in_flight, slot).set(self._in_flight[slot])

    def request_finished(self, record: RequestRecord) -> None:
        with self._lock:
            now = self._clock()
            known = self._slot_model.get(record.slot)
            namespace = known[2] if known else None
            self._slot_model[record.slot] = (record.served_name, record.source, namespace)
            self._fold_busy(now)
            agg = self._open.slot(record.slot, record.served_name)
            agg.max_in_flight = max(agg.max_in_flight, self._in_flight[record.slot])
            agg.busy_seconds += self._pending_busy.pop(record.slot, 0.0)
            if self._in_flight[record.slot] > 0:
                self._in_flight[record.slot] -= 1
            if self._in_flight[record.slot] == 0:
                self._busy_since.pop(record.slot, None)
            if not any(self._in_flight.values()):
                self._node_busy_since = None
            m = self.metrics
            m.child(m.in_flight, record.slot).set(self._in_flight[record.slot])
            self._count(record)
            self._aggregate(record)

    def swap_finished(
        self, *, slot: str, outcome: str, record: contract.SwapRecord | None = None
    ) -> None:
        with self._lock:
            self._counters[f"swaps_total/{outcome}"] += 1
            self.metrics.swaps.labels(slot=slot, outcome=outcome).inc()
            model = self._slot_model.get(slot, ("unknown", None, None))[0]
            agg = self._open.slot(slot, model)
            agg.swaps[outcome] = agg.swaps.get(outcome, 0) + 1
            self._open.swap_events.append(
                contract.SwapEvent(
                    slot=slot,
                    outcome=outcome,
                    at=record.finished_at if record and record.finished_at else _utc(self._clock()),
                    strategy=str(record.strategy) if record else None,
                    from_source=record.from_source if record else None,
                    to_source=record.to_source if record else None,
                    requests_served=record.requests_served if record else 0,
                    requests_failed=record.requests_failed if record else 0,
                    max_queue_wait_ms=record.max_queue_wait_ms if record else 0.0,
                )
            )

    def backend_restarted(self, slot: str) -> None:
        """A slot starts its backend again (it stopped serving, or loading failed)."""
        with self._lock:
            self._counters["backend_restarts_total"] += 1
            self.metrics.restarts.labels(slot=slot).inc()

    def counters(self) -> dict[str, float]:
        """Flat totals for GET /v1/state `counters`."""
        with self._lock:
            return dict(self._counters)

    # ---- optional enrichment -----------------------------------------------------------------

    def observe_slot(
        self, slot: str, *, model: str, source: str | None = None, namespace: str | None = None
    ) -> None:
        """Say which model a slot serves, so idle slots appear in intervals (placement)."""
        with self._lock:
            self._slot_model[slot] = (model, source, namespace)
            agg = self._open.slot(slot, model)
            agg.source, agg.namespace = source, namespace
            for outcome in contract.SwapOutcome:  # from 0: a first failure is an increase
                self.metrics.swaps.labels(slot=slot, outcome=str(outcome))

    def forget_slot(self, slot: str) -> None:
        with self._lock:
            self._slot_model.pop(slot, None)

    def add_host_sample(self, sample: intervals.HostSample) -> None:
        with self._lock:
            now = self._clock()
            elapsed = now - self._last_host_at if self._last_host_at is not None else 0.0
            self._open.add_host_sample(sample, elapsed_s=min(elapsed, self.interval_seconds))
            self._last_host, self._last_host_at = sample, now

    def host_view(self) -> dict[str, Any]:
        """What `/metrics` shows about the host (last sample, uptime, current power)."""
        with self._lock:
            now = self._clock()
            host = self._last_host
            view: dict[str, Any] = {"uptime_seconds": now - self.started_at}
            if host is not None:
                view |= {
                    "memory_total_bytes": host.memory_total_bytes,
                    "memory_used_bytes": host.memory_used_bytes,
                    "memory_available_bytes": host.memory_available_bytes,
                    "pressure": host.pressure,
                }
                if host.power_watts is not None:
                    view |= {
                        "power_watts": host.power_watts,
                        "power_source": host.power_source or "powermetrics",
                    }
                for key, value in (
                    ("thermal", host.thermal),
                    ("gpu_utilization_ratio", host.gpu_utilization),
                    ("gpu_temperature_celsius", host.gpu_temperature_c),
                    ("cpu_temperature_celsius", host.cpu_temperature_c),
                ):
                    if value is not None:
                        view[key] = value
            if "power_watts" not in view and self.idle_watts is not None and self.busy_watts:
                busy = self._node_busy_since is not None
                view |= {
                    "power_watts": self.busy_watts if busy else self.idle_watts,
                    "power_source": "estimated",
                }
            return view

    def thermal(self) -> contract.ThermalInfo | None:
        """The last sample's heat for GET /v1/state: None before the first sample, every field
        None when no source on this host tells anything."""
        with self._lock:
            host = self._last_host
        if host is None:
            return None
        return contract.ThermalInfo(
            level=host.thermal if host.thermal in intervals.THERMAL_ORDER else None,
            level_reason=host.thermal_reason[:300] if host.thermal_reason else None,
            gpu_utilization=host.gpu_utilization,
            gpu_temperature_celsius=host.gpu_temperature_c,
            cpu_temperature_celsius=host.cpu_temperature_c,
            power_watts=host.power_watts,
            power_source=host.power_source,
        )

    # ---- interval lifecycle (shipper) --------------------------------------------------------

    def roll(self, now: float | None = None) -> contract.TelemetryInterval | None:
        """Close the open interval if `now` is past its end; return it (else None)."""
        with self._lock:
            now = self._clock() if now is None else now
            if now < self._open.end:
                return None
            self._fold_busy(self._open.end)
            closed = self._snapshot(self._open.end)
            self._open = self._new_interval(now)
            start = self._open.start  # busy clocks restart at the new interval's start
            self._busy_since = {slot: max(t, start) for slot, t in self._busy_since.items()}
            if self._node_busy_since is not None:
                self._node_busy_since = max(self._node_busy_since, start)
            return closed

    def checkpoint(self, now: float | None = None) -> contract.TelemetryInterval:
        """The open interval so far, for persisting across a restart."""
        with self._lock:
            now = self._clock() if now is None else now
            self._fold_busy(now)
            return self._snapshot(now)

    def restore(self, saved: contract.TelemetryInterval) -> contract.TelemetryInterval | None:
        """Take back a checkpoint: merged when it is this node's open interval, else returned
        closed, as it was written (a checkpoint of another node name keeps that name)."""
        with self._lock:
            if saved.node == self.node and saved.interval_start.timestamp() == self._open.start:
                self._open.restore(saved)
                return None
            return saved

    def note_dropped(self, count: int) -> None:
        with self._lock:
            self._open.dropped_intervals += count
            self._counters["telemetry_intervals_dropped_total"] += count

    @property
    def open_interval_start(self) -> float:
        with self._lock:
            return self._open.start

    # ---- internals (lock held) ---------------------------------------------------------------

    def _new_interval(self, now: float) -> intervals.IntervalAggregate:
        agg = intervals.IntervalAggregate(
            node=self.node,
            start=window_start(now, self.interval_seconds),
            seconds=self.interval_seconds,
            agent_started_at=self.started_at,
        )
        for slot, (model, source, namespace) in self._slot_model.items():
            s = agg.slot(slot, model)
            s.source, s.namespace = source, namespace
        return agg

    def _fold_busy(self, now: float) -> None:
        for slot, since in list(self._busy_since.items()):
            if now > since:
                known = self._slot_model.get(slot)
                if known is None:
                    self._pending_busy[slot] = self._pending_busy.get(slot, 0.0) + now - since
                else:
                    self._open.slot(slot, known[0]).busy_seconds += now - since
            self._busy_since[slot] = max(now, since)
        if self._node_busy_since is not None:
            if now > self._node_busy_since:
                self._open.node_busy_seconds += now - self._node_busy_since
            self._node_busy_since = max(now, self._node_busy_since)

    def _snapshot(self, now: float) -> contract.TelemetryInterval:
        return self._open.to_wire(now=now, idle_watts=self.idle_watts, busy_watts=self.busy_watts)

    def _count(self, record: RequestRecord) -> None:
        c = self._counters
        c["requests_total"] += 1
        if record.error_kind is not None:
            c["requests_failed_total"] += 1
        c["prompt_tokens_total"] += record.prompt_tokens
        c["completion_tokens_total"] += record.completion_tokens
        outcome = "error" if record.error_kind else "ok"
        key = (record.slot, record.served_name, record.endpoint, record.stream, outcome)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new_series(key)
        requests, prompt, completion, ttft, tpot_, e2e, queue_wait = series
        requests.inc()
        if record.error_kind:
            m = self.metrics
            m.child(m.errors, record.slot, record.served_name, record.error_kind).inc()
        prompt.inc(record.prompt_tokens)
        completion.inc(record.completion_tokens)
        if record.ttft_s is not None:
            ttft.observe(record.ttft_s)
        tpot = time_per_output_token(record)
        if tpot is not None:
            tpot_.observe(tpot)
        e2e.observe(record.e2e_s)
        queue_wait.observe(record.queue_wait_s)

    def _new_series(self, key: tuple[str, str, str, bool, str]) -> tuple[Any, ...]:
        """The Prometheus children one kind of finished request updates, looked up once per
        (slot, model, endpoint, stream, outcome) instead of seven times per request."""
        slot, model, endpoint, stream, outcome = key
        m, child = self.metrics, self.metrics.child
        return (
            child(m.requests, slot, model, endpoint, str(stream).lower(), outcome),
            *(
                child(family, slot, model)
                for family in (
                    m.prompt_tokens,
                    m.completion_tokens,
                    m.ttft,
                    m.tpot,
                    m.e2e,
                    m.queue_wait,
                )
            ),
        )

    def _aggregate(self, record: RequestRecord) -> None:
        agg = self._open.slot(record.slot, record.served_name)
        agg.source = record.source
        agg.namespace = self._slot_model[record.slot][2]
        agg.requests += 1
        if record.error_kind is not None:
            agg.errors[record.error_kind] = agg.errors.get(record.error_kind, 0) + 1
        agg.prompt_tokens += record.prompt_tokens
        agg.completion_tokens += record.completion_tokens
        if record.ttft_s is not None:
            agg.ttft.observe(record.ttft_s)
        tpot = time_per_output_token(record)
        if tpot is not None:
            agg.tpot.observe(tpot)
        agg.e2e.observe(record.e2e_s)
        agg.queue_wait.observe(record.queue_wait_s)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)

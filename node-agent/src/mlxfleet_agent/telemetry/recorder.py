"""Per-slot request and swap telemetry of the agent (seam between the data plane and telemetry).

The data plane calls `Telemetry.request_started(slot)` and `request_finished(RequestRecord)` once
per request, the slots `swap_finished(slot=, outcome=)` once per swap and `observe_slot` when a
slot serves a model. Behind those calls: Prometheus metrics (`metrics.AgentMetrics`, served at
`/metrics`) and the open telemetry interval (`intervals.IntervalAggregate`) that the shipper
closes every 60 s and uploads. Never receives prompt or completion text: only counts and timings.

A request's two calls only append (its slot or record, and the time) to a log under the lock; the
log is folded `FOLD_EVERY` events at a time, and before anything reads or changes what it feeds
(a scrape of `/metrics`, `counters`, `host_view`, the interval's roll and checkpoint, the slot and
swap calls). Folding with the recorded times gives every figure it would have given at once, and a
batch runs the same code warm instead of once per request between the data plane's own steps.
May import: the standard library, contract, telemetry (intervals, metrics). Called by: dataplane,
slots, controlapi (counters, /metrics), telemetry.shipper, runtime.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from prometheus_client.core import Metric

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import intervals, metrics

FOLD_EVERY = 64  # requests' calls logged before they are folded (a read folds them at once)


class RequestRecord(NamedTuple):
    """What one finished data-plane request contributes. No request text, ever. (A NamedTuple:
    immutable, and built per request at a third of a frozen dataclass's cost.)"""

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
        self._counters: dict[str, float] = defaultdict(float)  # swaps, restarts, drops
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
        self._totals = metrics.RequestTotals()  # the request families, since the start
        self._log: list[tuple[float, str | RequestRecord]] = []  # not yet folded: (time, call)
        self._last_host_at: float | None = None
        now = self.started_at
        self._open = self._new_interval(now)
        self.metrics.add_host_collector(self.host_view)
        self.metrics.add_request_collector(self._request_families)

    # ---- data plane seam (stable) ------------------------------------------------------------

    def request_started(self, slot: str) -> None:
        with self._lock:
            self._log.append((self._clock(), slot))
            if len(self._log) >= FOLD_EVERY:
                self._fold()

    def request_finished(self, record: RequestRecord) -> None:
        with self._lock:
            self._log.append((self._clock(), record))
            if len(self._log) >= FOLD_EVERY:
                self._fold()

    def swap_finished(
        self, *, slot: str, outcome: str, record: contract.SwapRecord | None = None
    ) -> None:
        with self._lock:
            self._fold()
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
            self._fold()
            self._counters["backend_restarts_total"] += 1
            self.metrics.restarts.labels(slot=slot).inc()

    def counters(self) -> dict[str, float]:
        """Flat totals for GET /v1/state `counters`."""
        with self._lock:
            self._fold()
            out = dict(self._counters)
            models = self._totals.models.values()
            requests = sum(a.requests for a in models)
            if requests:
                failed = sum(sum(a.errors.values()) for a in models)
                out |= {
                    "requests_total": float(requests),
                    "prompt_tokens_total": float(sum(a.prompt_tokens for a in models)),
                    "completion_tokens_total": float(sum(a.completion_tokens for a in models)),
                }
                if failed:
                    out["requests_failed_total"] = float(failed)
            return out

    # ---- optional enrichment -----------------------------------------------------------------

    def observe_slot(
        self, slot: str, *, model: str, source: str | None = None, namespace: str | None = None
    ) -> None:
        """Say which model a slot serves, so idle slots appear in intervals (placement)."""
        with self._lock:
            self._fold()
            self._slot_model[slot] = (model, source, namespace)
            agg = self._open.slot(slot, model)
            agg.source, agg.namespace = source, namespace
            for outcome in contract.SwapOutcome:  # from 0: a first failure is an increase
                self.metrics.swaps.labels(slot=slot, outcome=str(outcome))

    def forget_slot(self, slot: str) -> None:
        with self._lock:
            self._fold()
            self._slot_model.pop(slot, None)

    def add_host_sample(self, sample: intervals.HostSample) -> None:
        with self._lock:
            self._fold()
            now = self._clock()
            elapsed = now - self._last_host_at if self._last_host_at is not None else 0.0
            self._open.add_host_sample(sample, elapsed_s=min(elapsed, self.interval_seconds))
            self._last_host, self._last_host_at = sample, now

    def host_view(self) -> dict[str, Any]:
        """What `/metrics` shows about the host (last sample, uptime, current power)."""
        with self._lock:
            self._fold()
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
            self._fold()
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
            self._fold()
            now = self._clock() if now is None else now
            self._fold_busy(now)
            return self._snapshot(now)

    def restore(self, saved: contract.TelemetryInterval) -> contract.TelemetryInterval | None:
        """Take back a checkpoint: merged when it is this node's open interval, else returned
        closed, as it was written (a checkpoint of another node name keeps that name)."""
        with self._lock:
            self._fold()
            if saved.node == self.node and saved.interval_start.timestamp() == self._open.start:
                self._open.restore(saved)
                return None
            return saved

    def note_dropped(self, count: int) -> None:
        with self._lock:
            self._fold()
            self._open.dropped_intervals += count
            self._counters["telemetry_intervals_dropped_total"] += count

    @property
    def open_interval_start(self) -> float:
        with self._lock:
            self._fold()
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

    def _fold(self) -> None:
        """Fold the logged calls, in order, at the times they were made."""
        if not self._log:
            return
        log, self._log = self._log, []
        for at, call in log:
            if isinstance(call, str):
                self._started(call, at)
            else:
                self._finished(call, at)

    def _started(self, slot: str, now: float) -> None:
        self._fold_busy(now)
        self._in_flight[slot] += 1
        self._busy_since.setdefault(slot, now)
        if self._node_busy_since is None:
            self._node_busy_since = now
        known = self._slot_model.get(slot)
        if known is not None:
            agg = self._open.slot(slot, known[0])
            agg.max_in_flight = max(agg.max_in_flight, self._in_flight[slot])

    def _finished(self, record: RequestRecord, now: float) -> None:
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
        tpot = time_per_output_token(record)
        agg.source, agg.namespace = record.source, namespace
        _add(agg, record, tpot)
        self._count(record, tpot, now)

    def _count(self, record: RequestRecord, tpot: float | None, now: float) -> None:
        """Into the request families since the start (`metrics.RequestTotals`)."""
        t = self._totals
        outcome = "error" if record.error_kind else "ok"
        stream = "true" if record.stream else "false"
        key = (record.slot, record.served_name, record.endpoint, stream, outcome)
        n = t.requests.get(key)
        if n is None:
            n, t.created[("requests", *key)] = 0, now
        t.requests[key] = n + 1
        model = t.models.get(key[:2])
        if model is None:
            model = t.models[key[:2]] = intervals.SlotAggregate(*key[:2])
            t.created[("models", *key[:2])] = now
        if record.error_kind is not None and record.error_kind not in model.errors:
            t.created[("errors", *key[:2], record.error_kind)] = now
        _add(model, record, tpot)

    def _request_families(self) -> list[Metric]:
        """What `/metrics` shows of the requests (the scrape's collector)."""
        with self._lock:
            self._fold()
            return self._totals.families(self._in_flight)


def _add(agg: intervals.SlotAggregate, record: RequestRecord, tpot: float | None) -> None:
    """One finished request into an aggregate (the open interval's, or the one since start)."""
    agg.requests += 1
    if record.error_kind is not None:
        agg.errors[record.error_kind] = agg.errors.get(record.error_kind, 0) + 1
    agg.prompt_tokens += record.prompt_tokens
    agg.completion_tokens += record.completion_tokens
    if record.ttft_s is not None:
        agg.ttft.observe(record.ttft_s)
    if tpot is not None:
        agg.tpot.observe(tpot)
    agg.e2e.observe(record.e2e_s)
    agg.queue_wait.observe(record.queue_wait_s)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)

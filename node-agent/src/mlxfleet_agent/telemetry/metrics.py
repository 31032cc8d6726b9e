"""Prometheus exposition of the agent's telemetry on its own registry (never the global one).

Names follow Prometheus conventions (`mlxfleet_agent_*`, `_total` counters, `_seconds` and
`_bytes` units). Labels are slot, model and small enums only: no request text, ever.
`AgentMetrics.exposition()` is what the control API serves at `/metrics`.
May import: prometheus_client, the standard library, contract. Called by: telemetry.recorder,
telemetry.shipper, controlapi (the /metrics route).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mlxfleet_agent import contract

NAMESPACE = "mlxfleet_agent"
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
PRESSURE_LEVELS = ("normal", "warn", "critical")
# macOS thermal pressure, in the names of ProcessInfo.thermalState (powermetrics' Nominal,
# Moderate, Heavy, Trapping/Sleeping map to nominal, fair, serious, critical). The alert rules
# read `mlxfleet_agent_thermal_pressure{level}`; a host reading without it exports nothing.
THERMAL_LEVELS = ("nominal", "fair", "serious", "critical")
# What can happen to a telemetry interval; each is exported from 0, so the first drop is an
# increase a rule sees (MlxfleetTelemetryDropped).
INTERVAL_RESULTS = ("closed", "uploaded", "upload_failed", "dropped")
# Host gauges exported when the host reading has the key: (key, help).
HOST_GAUGES = (
    ("memory_total_bytes", "Unified memory of the node."),
    ("memory_used_bytes", "Memory in use on the node."),
    ("memory_available_bytes", "Memory available to new allocations."),
    ("uptime_seconds", "Seconds since the agent started."),
    ("gpu_utilization_ratio", "GPU busy fraction over the last sample (0 to 1)."),
    ("gpu_temperature_celsius", "GPU die temperature."),
    ("cpu_temperature_celsius", "CPU die temperature."),
)


class _HostCollector(Collector):
    """Host gauges read at scrape time from a callable (memory, pressure, uptime, power)."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        host = self._read()
        for key, help_text in HOST_GAUGES:
            if host.get(key) is not None:
                yield GaugeMetricFamily(f"{NAMESPACE}_{key}", help_text, value=float(host[key]))
        yield _one_hot(
            "memory_pressure",
            "1 for the node's current memory pressure level, 0 for the others.",
            PRESSURE_LEVELS,
            host.get("pressure"),
        )
        if host.get("thermal") is not None:
            yield _one_hot(
                "thermal_pressure",
                "1 for the node's current thermal pressure level, 0 for the others.",
                THERMAL_LEVELS,
                host["thermal"],
            )
        if host.get("power_watts") is not None:
            power = GaugeMetricFamily(
                f"{NAMESPACE}_power_watts",
                "Package power: measured (source: the meter) or estimated from nominal idle/busy "
                "watts.",
                labels=["source"],
            )
            power.add_metric([str(host.get("power_source", "estimated"))], host["power_watts"])
            yield power


def _one_hot(name: str, help_text: str, levels: Iterable[str], now: object) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{NAMESPACE}_{name}", help_text, labels=["level"])
    for level in levels:
        family.add_metric([level], 1.0 if now == level else 0.0)
    return family


class _SlotCollector(Collector):
    """Per-slot gauges read at scrape time: requests queued for the slot (beyond its
    maxConcurrency, or while it is not ready) and whether it is busy (out of routing)."""

    def __init__(self, read: Callable[[], Iterable[contract.SlotStatus]]) -> None:
        self._read = read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        queued = GaugeMetricFamily(
            f"{NAMESPACE}_queued_requests",
            "Requests waiting in the slot's queue (beyond maxConcurrency, or while not ready).",
            labels=["slot"],
        )
        busy = GaugeMetricFamily(
            f"{NAMESPACE}_slot_busy",
            "1 while a request of the slot has waited past the busy deadline for its first "
            "token (the slot is out of routing), else 0.",
            labels=["slot"],
        )
        for slot in self._read():
            queued.add_metric([slot.name], float(slot.queued))
            busy.add_metric([slot.name], 1.0 if slot.busy else 0.0)
        yield queued
        yield busy


class AgentMetrics:
    """All agent metric families, registered on a private `CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        sm = ["slot", "model"]
        self.requests = prometheus_client.Counter(
            f"{NAMESPACE}_requests_total",
            "Finished data-plane requests.",
            [*sm, "endpoint", "stream", "outcome"],
            registry=r,
        )
        self.errors = prometheus_client.Counter(
            f"{NAMESPACE}_request_errors_total",
            "Failed requests by kind.",
            [*sm, "kind"],
            registry=r,
        )
        self.prompt_tokens = prometheus_client.Counter(
            f"{NAMESPACE}_prompt_tokens_total", "Prompt (input) tokens served.", sm, registry=r
        )
        self.completion_tokens = prometheus_client.Counter(
            f"{NAMESPACE}_completion_tokens_total",
            "Completion (output) tokens served.",
            sm,
            registry=r,
        )
        lat = contract.LATENCY_BUCKETS_S
        self.ttft = prometheus_client.Histogram(
            f"{NAMESPACE}_time_to_first_token_seconds",
            "Time to the first token (streams) or to the whole answer.",
            sm,
            buckets=lat,
            registry=r,
        )
        self.tpot = prometheus_client.Histogram(
            f"{NAMESPACE}_time_per_output_token_seconds",
            "Decode time per output token after the first.",
            sm,
            buckets=contract.TOKEN_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.e2e = prometheus_client.Histogram(
            f"{NAMESPACE}_request_duration_seconds",
            "End-to-end request latency at the agent.",
            sm,
            buckets=lat,
            registry=r,
        )
        self.queue_wait = prometheus_client.Histogram(
            f"{NAMESPACE}_queue_wait_seconds",
            "Time a request waited for its slot (swaps in hold mode).",
            sm,
            buckets=lat,
            registry=r,
        )
        self.in_flight = prometheus_client.Gauge(
            f"{NAMESPACE}_in_flight_requests", "Requests in flight per slot.", ["slot"], registry=r
        )
        self.swaps = prometheus_client.Counter(
            f"{NAMESPACE}_swaps_total",
            "Finished swaps by outcome.",
            ["slot", "outcome"],
            registry=r,
        )
        self.restarts = prometheus_client.Counter(
            f"{NAMESPACE}_backend_restarts_total",
            "Backends started again after one stopped serving or failed to start, per slot.",
            ["slot"],
            registry=r,
        )
        self.tls_expiry = prometheus_client.Gauge(
            f"{NAMESPACE}_tls_certificate_expiry_timestamp_seconds",
            "When the certificate a listener serves expires (its notAfter), Unix seconds.",
            ["listener"],
            registry=r,
        )
        self.intervals = prometheus_client.Counter(
            f"{NAMESPACE}_telemetry_intervals_total",
            "Telemetry intervals by what happened to them.",
            ["result"],  # closed | uploaded | upload_failed | dropped
            registry=r,
        )
        for result in INTERVAL_RESULTS:
            self.intervals.labels(result=result)
        self.buffered = prometheus_client.Gauge(
            f"{NAMESPACE}_telemetry_buffered_intervals",
            "Closed intervals waiting on disk for the object store.",
            registry=r,
        )

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)` (label values in the family's order), remembered: a request
        pays one dictionary lookup per series instead of `labels()`' checks (no series is ever
        removed from these families)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def add_host_collector(self, read: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(_HostCollector(read))

    def add_slot_collector(self, read: Callable[[], Iterable[contract.SlotStatus]]) -> None:
        self.registry.register(_SlotCollector(read))

    def exposition(self) -> bytes:
        return bytes(prometheus_client.generate_latest(self.registry))

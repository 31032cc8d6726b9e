"""Prometheus exposition of the agent's telemetry on its own registry (never the global one).

Names follow Prometheus conventions (`mlxfleet_agent_*`, `_total` counters, `_seconds` and
`_bytes` units). Labels are slot, model and small enums only: no request text, ever.
`AgentMetrics.exposition()` is what the control API serves at `/metrics`.
The data plane's request families (requests, errors, tokens, the four latency histograms, the
in-flight gauge) are plain numbers that the recorder adds to under its own lock (`RequestTotals`),
exported by a collector at scrape time in the same names, labels and samples `prometheus_client`'s
own families would write: a request pays no child lookup and no per-child lock.
May import: prometheus_client, the standard library, contract, telemetry.intervals.
Called by: telemetry.recorder, telemetry.shipper, controlapi (the /metrics route).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import prometheus_client
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import intervals

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


_go_float: Callable[[float], str] = floatToGoString  # `le`, as prometheus_client writes it
# (slot, model, endpoint, stream "true"|"false", outcome "ok"|"error"): one requests_total series
RequestKey = tuple[str, str, str, str, str]
# a histogram family and which of a (slot, model)'s histograms it shows
_HistogramOf = tuple[
    HistogramMetricFamily, Callable[[intervals.SlotAggregate], intervals.Histogram]
]


@dataclass(slots=True)
class RequestTotals:
    """The data plane's request families as plain numbers since the agent started.

    `requests` counts by `RequestKey`; `models` holds, per (slot, model), the tokens, the errors
    by kind and the four latency histograms (`intervals.SlotAggregate`, the shape one interval
    keeps too); `created` says when each labelled series first counted (its `_created` sample,
    keyed by the family's name and the series' labels). The recorder mutates them under its lock
    and renders `families` under it: never shared without it."""

    requests: dict[RequestKey, int] = field(default_factory=dict)
    models: dict[tuple[str, str], intervals.SlotAggregate] = field(default_factory=dict)
    created: dict[tuple[str, ...], float] = field(default_factory=dict)

    def families(self, in_flight: Mapping[str, int]) -> list[Metric]:
        """Every request family, with its series (a family without any still says its HELP and
        TYPE, as a labelled prometheus_client family does)."""
        sm = ["slot", "model"]
        requests = CounterMetricFamily(
            f"{NAMESPACE}_requests_total",
            "Finished data-plane requests.",
            labels=[*sm, "endpoint", "stream", "outcome"],
        )
        for key, n in self.requests.items():
            requests.add_metric(list(key), n, created=self.created.get(("requests", *key)))
        errors = CounterMetricFamily(
            f"{NAMESPACE}_request_errors_total", "Failed requests by kind.", labels=[*sm, "kind"]
        )
        prompt = CounterMetricFamily(
            f"{NAMESPACE}_prompt_tokens_total", "Prompt (input) tokens served.", labels=sm
        )
        completion = CounterMetricFamily(
            f"{NAMESPACE}_completion_tokens_total",
            "Completion (output) tokens served.",
            labels=sm,
        )
        histograms: tuple[_HistogramOf, ...] = (
            (
                HistogramMetricFamily(
                    f"{NAMESPACE}_time_to_first_token_seconds",
                    "Time to the first token (streams) or to the whole answer.",
                    labels=sm,
                ),
                lambda a: a.ttft,
            ),
            (
                HistogramMetricFamily(
                    f"{NAMESPACE}_time_per_output_token_seconds",
                    "Decode time per output token after the first.",
                    labels=sm,
                ),
                lambda a: a.tpot,
            ),
            (
                HistogramMetricFamily(
                    f"{NAMESPACE}_request_duration_seconds",
                    "End-to-end request latency at the agent.",
                    labels=sm,
                ),
                lambda a: a.e2e,
            ),
            (
                HistogramMetricFamily(
                    f"{NAMESPACE}_queue_wait_seconds",
                    "Time a request waited for its slot (swaps in hold mode).",
                    labels=sm,
                ),
                lambda a: a.queue_wait,
            ),
        )
        for (slot, model), agg in self.models.items():
            labels = [slot, model]
            for kind, n in agg.errors.items():
                errors.add_metric(
                    [*labels, kind], n, created=self.created.get(("errors", slot, model, kind))
                )
            created = self.created.get(("models", slot, model))
            prompt.add_metric(labels, agg.prompt_tokens, created=created)
            completion.add_metric(labels, agg.completion_tokens, created=created)
            for family, of in histograms:
                _add_histogram(family, labels, of(agg), created)
        gauge = GaugeMetricFamily(
            f"{NAMESPACE}_in_flight_requests", "Requests in flight per slot.", labels=["slot"]
        )
        for slot, n in in_flight.items():
            gauge.add_metric([slot], n)
        return [requests, errors, prompt, completion, *(f for f, _ in histograms), gauge]


def _add_histogram(
    family: HistogramMetricFamily,
    labels: list[str],
    histogram: intervals.Histogram,
    created: float | None,
) -> None:
    """One (slot, model) series: cumulative buckets with `le` as prometheus_client writes it,
    then its `_created` (HistogramMetricFamily takes no creation time of its own)."""
    buckets, running = [], 0
    for bound, n in zip((*histogram.bounds, float("inf")), histogram.counts, strict=True):
        running += n
        buckets.append((_go_float(bound), running))
    family.add_metric(labels, buckets, histogram.total)
    if created is not None:
        family.samples.append(
            Sample(f"{family.name}_created", {"slot": labels[0], "model": labels[1]}, created)
        )


class _RequestCollector(Collector):
    """The request families, rendered at scrape time by the recorder (`RequestTotals.families`
    under its lock)."""

    def __init__(self, read: Callable[[], list[Metric]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return self._read()


class AgentMetrics:
    """All agent metric families, registered on a private `CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        r = self.registry
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

    def add_host_collector(self, read: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(_HostCollector(read))

    def add_request_collector(self, read: Callable[[], list[Metric]]) -> None:
        self.registry.register(_RequestCollector(read))

    def add_slot_collector(self, read: Callable[[], Iterable[contract.SlotStatus]]) -> None:
        self.registry.register(_SlotCollector(read))

    def exposition(self) -> bytes:
        return bytes(prometheus_client.generate_latest(self.registry))

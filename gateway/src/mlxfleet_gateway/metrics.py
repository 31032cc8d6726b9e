"""Prometheus metrics of the gateway, on its own registry (served on `--metrics-listen`).

Labels are key *names* (the API-key Secret's name, `anonymous` without a key), model names,
backend and replica ids and small enums: never a key, never request text.
May import: prometheus_client, the standard library. Called by: proxy, relay, metering, health,
shipper, server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAMESPACE = "mlxfleet_gateway"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True, slots=True)
class KeyFacts:
    """One API key as the key gauges show it: how full each limit is, when it expires."""

    key: str
    usage: dict[str, float] = field(default_factory=dict)  # limit name -> used / limit
    expires_at: float | None = None  # Unix seconds


class _KeyCollector(Collector):
    """Per-key gauges read at scrape time (nothing on the request path)."""

    def __init__(self, read: Callable[[], Iterable[KeyFacts]]) -> None:
        self._read = read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        usage = GaugeMetricFamily(
            f"{NAMESPACE}_key_limit_usage_ratio",
            "How full an API key's rate limit is in this gateway: the last 60 s of use over "
            "the limit (1 = requests are being refused).",
            labels=["key", "limit"],
        )
        expiry = GaugeMetricFamily(
            f"{NAMESPACE}_key_expiry_timestamp_seconds",
            "When an API key expires (its Secret's expiresAt), Unix seconds.",
            labels=["key"],
        )
        for facts in self._read():
            for limit, ratio in sorted(facts.usage.items()):
                usage.add_metric([facts.key, limit], ratio)
            if facts.expires_at is not None:
                expiry.add_metric([facts.key], facts.expires_at)
        yield usage
        yield expiry


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        r = self.registry

        def counter(name: str, text: str, labels: list[str]) -> prometheus_client.Counter:
            return prometheus_client.Counter(f"{NAMESPACE}_{name}", text, labels, registry=r)

        def gauge(name: str, text: str, labels: list[str]) -> prometheus_client.Gauge:
            return prometheus_client.Gauge(f"{NAMESPACE}_{name}", text, labels, registry=r)

        self.requests = counter(
            "requests_total",
            "Finished requests by key, requested model, backend and outcome (ok, error, cut: a "
            "stream that broke off after it started).",
            ["key", "model", "backend", "outcome"],
        )
        self.prompt_tokens = counter(
            "prompt_tokens_total", "Prompt tokens served per key.", ["key", "team", "model"]
        )
        self.completion_tokens = counter(
            "completion_tokens_total",
            "Completion tokens served per key.",
            ["key", "team", "model"],
        )
        self.errors = counter(
            "request_errors_total", "Requests that failed, by key and kind.", ["key", "kind"]
        )
        self.rejected = counter(
            "rejected_total",
            "Requests refused before routing (401, 403, 404, 413, 429) by key and reason.",
            ["key", "reason"],
        )
        self.attempts = counter(
            "upstream_attempts_total",
            "Attempts on one replica or external backend, by result.",
            ["backend", "result"],
        )
        self.retries = counter(
            "retries_total", "Attempts sent to another replica, by reason.", ["reason"]
        )
        for reason in ("busy", "failed"):  # from 0: the dashboard and rules see the first
            self.retries.labels(reason)
        self.budget_exhausted = counter(
            "retry_budget_exhausted_total", "Retries the retry budget refused.", []
        )
        self.fallbacks = counter(
            "fallbacks_total", "Requests served by a route's fallback chain.", ["route", "reason"]
        )
        self.ejections = counter(
            "ejections_total", "Replicas taken out of rotation, by reason.", ["backend", "reason"]
        )
        self.replica_up = gauge(
            "replica_up", "1 while a replica is in rotation, 0 while ejected.", ["backend"]
        )
        self.cold_starts = counter(
            "cold_start_requests_total",
            "Requests for a sleeping deployment, by outcome: held (waited for a replica), "
            "queue_full and timeout (answered 503 + Retry-After).",
            ["deployment", "outcome"],
        )
        self.cold_start_waiting = gauge(
            "cold_start_waiting_requests",
            "Requests this gateway holds now for sleeping deployments.",
            [],
        )
        self.outstanding = gauge(
            "outstanding_requests", "Requests in flight per replica (this gateway).", ["backend"]
        )
        self.ttft = prometheus_client.Histogram(
            f"{NAMESPACE}_time_to_first_byte_seconds",
            "Request start to the first byte forwarded (the first event of a stream).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = prometheus_client.Histogram(
            f"{NAMESPACE}_request_duration_seconds",
            "Request start to its last byte.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.catalog = gauge("catalog_entries", "Objects the gateway watches, by kind.", ["kind"])
        self.telemetry = counter(
            "telemetry_intervals_total",
            "Telemetry intervals by result (closed, uploaded, upload_failed, dropped).",
            ["result"],
        )
        for result in ("closed", "uploaded", "upload_failed", "dropped"):
            self.telemetry.labels(result)  # from 0: a first failure is an increase

        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def watch_keys(self, read: Callable[[], Iterable[KeyFacts]]) -> None:
        """Export the API keys' limit usage and expiry, read from `read()` at each scrape."""
        self.registry.register(_KeyCollector(read))

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered: the request path skips the label checks."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)

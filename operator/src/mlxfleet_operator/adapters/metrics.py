"""Prometheus metrics of the operator (own registry, served on --metrics-port).

The alert rules (charts/mlxfleet/templates/monitoring/prometheusrule.yaml) read these names:
rename one and its rule and promtool test go with it.
May import: prometheus-client and the standard library. Called by: handlers and `runtime`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(
    "mlxfleet_operator_reconciles_total",
    "Handler runs by kind and result (ok, error).",
    ["kind", "result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "mlxfleet_operator_reconcile_seconds",
    "Duration of one handler run by kind.",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
AGENT_CALLS = Counter(
    "mlxfleet_operator_agent_calls_total",
    "Control API calls to agents by operation and result (ok, refused, unreachable).",
    ["op", "result"],
    registry=REGISTRY,
)
NODE_READY = Gauge(
    "mlxfleet_operator_node_ready",
    "1 when the InferenceNode is Ready.",
    ["node"],
    registry=REGISTRY,
)
NODE_MISSES = Gauge(
    "mlxfleet_operator_node_heartbeat_misses",
    "Consecutive polls of the node's agent that got no answer (0 once one answers).",
    ["node"],
    registry=REGISTRY,
)
AGENT_TOKEN_EXPIRY = Gauge(
    "mlxfleet_operator_agent_token_expiry_timestamp_seconds",
    "When the node's agent token expires (the token Secret's expiresAt), Unix seconds.",
    ["node"],
    registry=REGISTRY,
)
DEPLOYMENT_READY = Gauge(
    "mlxfleet_operator_deployment_ready_replicas",
    "Ready replicas of a ModelDeployment.",
    ["namespace", "name"],
    registry=REGISTRY,
)
DEPLOYMENT_READY_CONDITION = Gauge(
    "mlxfleet_operator_deployment_ready",
    "1 when the ModelDeployment's Ready condition is True.",
    ["namespace", "name"],
    registry=REGISTRY,
)
DEPLOYMENT_WANTED = Gauge(
    "mlxfleet_operator_deployment_replicas",
    "Desired replicas of a ModelDeployment.",
    ["namespace", "name"],
    registry=REGISTRY,
)
SWAP_PLANS = Counter(
    "mlxfleet_operator_swapplans_finished_total",
    "SwapPlans that reached a final phase, by phase.",
    ["phase"],
    registry=REGISTRY,
)

LEADER = Gauge(
    "mlxfleet_operator_leader",
    "1 while this operator replica acts: it holds the leader Lease, or runs --standalone.",
    registry=REGISTRY,
)


def observe_deployment(
    namespace: str, name: str, *, ready: bool, ready_replicas: int, replicas: int
) -> None:
    """A ModelDeployment's gauges after a reconcile (or zeros once it is gone)."""
    DEPLOYMENT_READY_CONDITION.labels(namespace, name).set(1 if ready else 0)
    DEPLOYMENT_READY.labels(namespace, name).set(ready_replicas)
    DEPLOYMENT_WANTED.labels(namespace, name).set(replicas)


def forget_deployment(namespace: str, name: str) -> None:
    """A deleted ModelDeployment leaves no series behind (a stale 0 would page forever)."""
    for gauge in (DEPLOYMENT_READY_CONDITION, DEPLOYMENT_READY, DEPLOYMENT_WANTED):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, name)


def observe_token_expiry(node: str, expires_at: datetime | None) -> None:
    """The node's token expiry, or no series when its Secret declares none."""
    if expires_at is not None:
        AGENT_TOKEN_EXPIRY.labels(node).set(expires_at.timestamp())
    else:
        with contextlib.suppress(KeyError):
            AGENT_TOKEN_EXPIRY.remove(node)


def forget_node(node: str) -> None:
    """A deleted InferenceNode leaves no series behind."""
    for gauge in (NODE_READY, NODE_MISSES, AGENT_TOKEN_EXPIRY):
        with contextlib.suppress(KeyError):
            gauge.remove(node)


def count_phases(phases: Iterable[str]) -> None:
    """Export every final SwapPlan phase at 0 from the start, so the first failure is an
    increase a rule sees (a counter born at 1 has no increase)."""
    for phase in phases:
        SWAP_PLANS.labels(phase)


def report_leadership(acting: Callable[[], bool]) -> None:
    """`mlxfleet_operator_leader` reads `acting()` at each scrape."""
    LEADER.set_function(lambda: 1.0 if acting() else 0.0)


def serve(host: str, port: int) -> None:
    """Start the /metrics HTTP server in a daemon thread."""
    start_http_server(port, addr=host, registry=REGISTRY)

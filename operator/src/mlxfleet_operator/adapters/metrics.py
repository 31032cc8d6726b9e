"""Prometheus metrics of the operator (own registry, served on --metrics-port).

May import: prometheus-client and the standard library. Called by: handlers and `runtime`.
"""

from __future__ import annotations

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
DEPLOYMENT_READY = Gauge(
    "mlxfleet_operator_deployment_ready_replicas",
    "Ready replicas of a ModelDeployment.",
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


def serve(host: str, port: int) -> None:
    """Start the /metrics HTTP server in a daemon thread."""
    start_http_server(port, addr=host, registry=REGISTRY)

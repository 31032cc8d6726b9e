"""mlxfleet gateway: the fleet's OpenAI-compatible front door (routes, keys, failover, fallback).

Layout: `core/` pure decisions (catalog of names, route rules, balancing, keys, limits, retry
budget, SSE usage scanning, usage book) with explicit `now` and injected randomness; `watch`
(Kubernetes watches -> snapshots) and `view` (the parsed view); `health` (active probes); `proxy`
(the ASGI data path: plan, attempts, failover) with `calls`, `relay`, `liveness`, `metering` and
`listing`, over the shared keep-alive client (`mlxfleet_common.wire.httpclient`); `metrics` and
`shipper` (Prometheus, per-key usage to S3); `settings`, `server` and `cli` (flags, composition
root).
May import: mlxfleet_operator.api (pure CRD models), mlxfleet_agent.contract and mlxfleet_common
(the wire kit shared with the agent's data plane) only from the other packages. Called by: the
`mlxfleet-gateway` console script and the tests.
"""

__version__ = "0.1.0"

"""mlxfleet gateway: the fleet's OpenAI-compatible front door (routes, keys, failover, fallback).

Layout: `core/` pure decisions (catalog of names, route rules, balancing, keys, limits, retry
budget, SSE usage scanning, usage book) with explicit `now` and injected randomness; `upstream`
(keep-alive HTTP/1.1 client, standalone); `watch` (Kubernetes watches -> snapshots); `health`
(active probes); `proxy` (the ASGI data path: plan, attempts, failover) with `calls`, `relay`,
`liveness`, `metering` and `listing`; `telemetry` (metrics, S3 shipping); `server` and `cli`
(composition root, flags).
May import: mlxfleet_operator.api (pure CRD models) and mlxfleet_agent.contract only from the other
packages. Called by: the `mlxfleet-gateway` console script and the tests.
"""

__version__ = "0.1.0"

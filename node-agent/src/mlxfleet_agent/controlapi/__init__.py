"""The control API on the control port (bearer token, JSON, OpenAPI): what the operator drives.

`app` (FastAPI routes, error mapping, /metrics), `guard` (token and body bound, before parsing),
`state` (GET /v1/state).
May import: fastapi/starlette, contract, refusals, host.platform, models.catalog, slots,
telemetry, the standard library. Never the data plane. Called by: runtime.
"""

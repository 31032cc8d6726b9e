"""mlxfleet node agent: runs mlx-lm backends on one Mac behind a control API and a data plane.

One folder per role (docs/development.md has the map): `contract/` (wire types) and `sizing`
(pure memory estimate) are what the operator and the gateway import; `slots/` (slots, swaps,
registry), `models/` (sources, store), `backends/` (engine processes), `dataplane/`,
`controlapi/`, `telemetry/`, `host/` (machine facts, atomic files, S3 client), `runtime/`
(settings, composition root, serve); `refusals` (domain errors), `cli`, `service_units`
at the top; `dev/` is development tooling (tiny models), not the running agent.
May import: nothing from mlxfleet_operator or a gateway. Called by: the `mlxfleet-agent` console
script.
"""

__version__ = "0.1.0"

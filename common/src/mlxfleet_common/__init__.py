"""What the three programs (agent, operator, gateway) share: one home per shared concept.

`wire/` holds what the agent and the gateway share on the wire (the HTTP client, stream
forwarding, limits, health checks, body checks, the endpoint table and header names). It imports
none of the programs: `mlxfleet_agent`, `mlxfleet_operator` and `mlxfleet_gateway` import it, never
the other way round (an import-linter contract).
"""

"""Pure decisions of the operator: placement, naming, conditions, heartbeats, swap-plan progress.

May import: the standard library, pydantic, `mlxfleet_operator.api` and the agent's pure
`contract`/`memory` modules; never kopf, kubernetes, httpx or boto3 (import-linter enforces it).
Called by: `mlxfleet_operator.handlers` (through values the adapters gathered). Every decision
takes its inputs, including `now`, as arguments.
"""

"""The gateway's pure core: decisions as functions of their inputs, an explicit `now` (monotonic
seconds unless a name says otherwise) and injected randomness. No sockets, no clock, no threads.

Modules: `errors` (OpenAI-shaped errors), `traits` (what routing reads from a request),
`catalog` (names -> deployments and routes, per caller scope), `plan` (route rules, weights,
fallback), `balancer` (least outstanding requests, power of two choices, prefix affinity, passive
health), `budget` (retry budget), `keys` (API keys from Secrets), `limits` (requests and tokens
per minute), `usage` (per-key aggregates), `budgets` (money: prices, spend, who is refused),
`ledger` (the month's usage rows). Token counting of answers is shared with the agent
(`mlxfleet_common.wire.openai_proxy`).
May import: the standard library, pydantic, mlxfleet_operator.api, mlxfleet_agent.contract,
mlxfleet_common.wire.openai_proxy (the error shape).
Called by: the gateway's runtime modules and the unit tests.
"""

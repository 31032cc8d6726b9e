"""SwapPlan decisions (pure): a model transition run one node at a time, fed by what agents report.

A plan runs its steps one node at a time. A step that can do nothing (its node carries no
replica, or there is no such InferenceNode) is `Skipped` with the reason; a plan whose every step
was skipped ends `Failed` (`NothingToDo`), never `Completed`. A paused plan that has not started
stays `Paused` until it is approved. When a step fails (the agent rolled that node back), the plan
goes `RollingBack`: its completed steps are swapped back, last completed first, then the plan ends
`RolledBack` with the failed step's reason (`Failed` if a revert fails too). Every decision is
recomputed from the plan's status plus fresh observations, so an operator killed mid-plan resumes
without repeating a step.

Modules, by concern:
- `state`: the operator-owned plan state, what one node reports (`NodeSlot`), the actions.
- `steps`: the steps a plan starts with, and how an agent's swap record fills a step.
- `progress`: `advance`, one step of the state machine (and the order of plans of a deployment).
- `rollback`: reverting completed steps after a failure.
- `effects`: what a plan's steps leave each node serving, as the deployment's `PlanInfo`, and
  which plan governs a deployment (`governing`).
- `gate`: before advancing: must the plan wait, does its deployment exist, which nodes it covers.
- `requests`: the agent slot each action asks for.
- `status`: the SwapPlan status and conditions from a state, and the Event a phase change posts.

May import: the standard library, `api`, the agent `contract`, `core.kit.conditions`, `core.fleet`,
`core.sharded` (group steps) and `core.deployment` (the slot a step asks for, `PlanInfo`): the top
layer of core. Called by: the SwapPlan handler, and the ModelDeployment handlers (`effects`,
`prefetch`).
"""

"""Pure decisions of the operator: every decision is a function of its inputs, `now` included.

Modules: `deployment/` (ModelDeployment: facts, footprint, placement inputs, the governing plan,
desired slots, what one reconcile does, status), `swapplan/` (SwapPlan: state, steps, progress,
rollback, effects, gate, requests, status), `sharded/` (a sharded ModelDeployment: request,
ring, formation, ranks, health, groupstatus), `nodes` (InferenceNode status from a poll),
`placement` (which nodes carry replicas), `sharding` (which nodes carry a group's ranks),
`heartbeat` (debounce), `conditions` (kstatus bookkeeping), `naming` (deterministic names),
`events` (Kubernetes Events as values), `cost` (report arithmetic).
May import: the standard library's pure modules, pydantic, `mlxfleet_operator.api` and the
agent's `contract` and `sizing`; never an I/O library, a clock or the environment (an
import-linter allow-list enforces it). Called by: handlers and adapters (typed facts in, values
and actions out), reports (`cost`).
"""

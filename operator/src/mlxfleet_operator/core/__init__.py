"""Pure decisions of the operator: every decision is a function of its inputs, `now` included.

Layers, each importing only those below it (an import-linter layers contract, so no package
circle): `swapplan/` (SwapPlan: state, steps, progress, rollback, effects, gate, requests,
status) over `sharded/` (a sharded ModelDeployment: request, ring, formation, ranks, health,
groupstatus) over `deployment/` (ModelDeployment: footprint, replicas, the governing plan, desired
slots, what one reconcile does, status) over the other kinds, `node/` (InferenceNode: status
from a poll over the macOS doctor's conditions) and `modelroute/` (ModelRoute status); those are
the per-kind packages, named after their kind. Under them the fleet-wide ones: `fleet/` (node
facts, slot requests, replica placement, node views, group placement) over `kit/` (`thermal`,
`heartbeat`, `naming`, `cost`, `leadership`, `clocks`, `conditions`, `events`). Every module of
core lives in a package and core holds no module but this one (tests/support/pkgcircles.py), so
no package circle (core <-> core.fleet) can form through loose modules.
May import: the standard library's pure modules, pydantic, `mlxfleet_operator.api` and the
agent's `contract` and `sizing`; never an I/O library, a clock or the environment (an
import-linter allow-list enforces it). Called by: handlers and adapters (typed facts in, values
and actions out), reports (`kit.cost`).
"""

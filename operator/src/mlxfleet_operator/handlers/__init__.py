"""kopf handlers: parse the body, call core, call adapters, write status. Thin on purpose.

Nothing registers at import: `registry(config)` builds the kopf registry `main` runs, with the
timer intervals from the process's settings (kopf reads intervals when a handler is registered,
so settings are passed in here, never read at import time). Handlers read every other setting
from the runtime (`run.rt.config`).

Modules: `guard` (the one wrapper every resource handler runs in: per-object lock, adapter
errors -> kopf retries, metrics), `indexes` (the kopf indexes and their typed view),
`lifecycle` (kopf settings, cleanup, liveness probe), `nodes` (InferenceNode heartbeat),
`deployments` (ModelDeployment reconcile, endpoints, failover, teardown), `convergeskip` (its
converge tick's skip check and the autoscaler's count it reads), `sharded` (its spec.sharding
half), `demand` (wakes sleeping deployments a gateway holds requests for), `swapplans`
(SwapPlan execution), `modelroutes` (ModelRoute status). Handler modules never import each
other: they share only `guard` and `indexes` (an import-linter contract; `deployments` also
imports its two halves, `sharded` and `convergeskip`); each one has a `register(registry, ...)`
but those two halves.
A handler returns None and sets status.observedGeneration through core's status functions.
May import: kopf, adapters, core, api, settings. Called by: `main`.
"""

from __future__ import annotations

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.handlers import (
    demand,
    deployments,
    indexes,
    lifecycle,
    modelroutes,
    nodes,
    swapplans,
)


def registry(config: opsettings.OperatorSettings) -> kopf.OperatorRegistry:
    """Every handler of the operator, registered with intervals from `config`."""
    out = kopf.OperatorRegistry()
    lifecycle.register(out, config)
    indexes.register(out)
    nodes.register(out, config)
    deployments.register(out, config)
    demand.register(out)
    swapplans.register(out, config)
    modelroutes.register(out, config)
    return out

"""kopf handlers: parse the body, call core, call adapters, write status. Thin on purpose.

Importing this package registers every handler with kopf, with intervals from
`mlxfleet_operator.settings.current()`. Modules: `lifecycle` (startup, cleanup, liveness probe),
`nodes` (InferenceNode heartbeat), `deployments` (ModelDeployment reconcile, endpoints, failover),
`swapplans` (SwapPlan execution), `modelroutes` (ModelRoute status). Handlers return None and
set status.observedGeneration.
May import: kopf, adapters, core, api, settings. Called by: kopf (through `main`).
"""

from mlxfleet_operator.handlers import deployments, lifecycle, modelroutes, nodes, swapplans

__all__ = ["deployments", "lifecycle", "modelroutes", "nodes", "swapplans"]

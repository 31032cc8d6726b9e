"""ModelDeployment decisions (pure), one module per concern:

- `footprint`: memory per replica (spec override or the shared estimate), and what to say while
  nobody knows it.
- `replicas`: where the replicas go: the placement request, where replicas are now, the decision.
- `plan`: what the deployment needs of its SwapPlan (`PlanInfo`), whether a new one is due,
  the plan to create.
- `slots`: the desired slot per node, the slot requests, make-before-break hand-over, deletions.
- `claims`: agent slot names shared by two deployments (the oldest keeps it).
- `status`: placements as the agents report them, the kstatus verdict, the whole status.
- `autoscale`, `preemption`, `evictions`, `candidates`, `intent`: the count, who evicts whom
  (the nominations), what an eviction does next (the victim's leave and back-off, both sides'
  records, Events and texts), the prefilter's node index, what one reconcile does.
- `skip`: whether a converge tick may be skipped, and what it depends on (`reads`).

May import: the standard library, `api`, the agent `contract` and `sizing`, `core.fleet` (node
facts, placement), the core kit (`naming`, `conditions`, `events`); never `sharded` or
`swapplan` (layers above). Called by: the ModelDeployment handler (with `NodeFacts` built from
the InferenceNode index and the fleet view), `core.sharded` and `core.swapplan` (the slot spec,
`PlanInfo`).
"""

"""ModelDeployment decisions (pure), one module per concern:

- `facts`: what the decisions know: each node with its agent's last answer, and the agents'
  answers to slot and prefetch requests (classified by HTTP status and field, never by text).
- `footprint`: memory per replica (spec override or the shared estimate), and what to say while
  nobody knows it.
- `placing`: placement inputs (node views, the request, where replicas are now) and the decision.
- `plan`: the SwapPlan governing the replicas, whether a new one is due, the plan to create.
- `slots`: the desired slot per node, the slot requests, make-before-break hand-over, deletions.
- `claims`: agent slot names shared by two deployments (the oldest keeps it).
- `status`: placements as the agents report them, the kstatus verdict, the whole status.

May import: the standard library, `api`, the agent `contract` and `sizing`, sibling core modules
(`naming`, `placement`, `conditions`, `events`, `swapplan.effects`). Called by: the
ModelDeployment handler (with `NodeFacts` built from the InferenceNode index and the fleet view),
`core.swapplan` (the slot spec) and `core.nodes` (the node budget).
"""

"""Fleet-wide decisions and facts (pure), the layer under the per-kind packages (`deployment`,
`sharded`, `swapplan`, `node`, `modelroute`), one module per concept:

- `facts`: each InferenceNode with its agent's last answer (`NodeFacts`), memory as the
  scheduler counts it, a slot PUT to send (`SlotRequest`) and what agents answered (`Outcome`,
  `Prefetch`).
- `placement`: replica placement: which nodes carry N replicas (filters, scoring, stability,
  drain), over `NodeView`s.
- `nodeviews`: each node as placement sees it (`NodeView` from `NodeFacts`), kept per node
  between reconciles (`prepare`, `views_for`).
- `groupplacement`: group placement: N ranks of a sharded replica on N distinct nodes (rank
  shares, fabric preference, surge or hold).

May import: the standard library's pure modules, pydantic, `api`, the agent `contract` and
`sizing`, and the core modules below it (`thermal`, `conditions`, `events`); never a kind package
above it (an import-linter layers contract). Called by: the kind packages, the handlers and the
fleet adapter.
"""

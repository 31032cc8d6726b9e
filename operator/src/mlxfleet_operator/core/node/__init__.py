"""InferenceNode decisions (pure), one module per concern, in layers (an import-linter contract):

- `status`: the status from a poll (the agent's answer folded with the heartbeat debounce), the
  Events a poll posts, a joined node awaiting approval, the node's own credentials.
- `doctor`: the macOS doctor's conditions (what the agent read from the Mac, judged), under
  `status`.

May import: the standard library, `api`, the agent `contract`, `core.fleet` (the node's budget,
the fabric label), the core kit; never `deployment`, `sharded`, `swapplan` or `modelroute`.
Called by: the InferenceNode handler and the fleet adapter (`status`).
"""

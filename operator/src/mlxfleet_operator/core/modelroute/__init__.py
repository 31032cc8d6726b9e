"""ModelRoute decisions (pure):

- `status`: each backend's readiness (a deployment's ready replicas, a provider-key Secret as
  seen), the traffic split in force, the verdict.

May import: the standard library, `api`, the core kit; never another kind's package.
Called by: the ModelRoute handler, `adapters.kube` (the `KeySeen` it answers).
"""

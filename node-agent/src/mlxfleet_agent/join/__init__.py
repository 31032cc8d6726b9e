"""`mlxfleet-agent join` / `leave`: a Mac registers itself with the cluster, and leaves it.

plan (pure: flags -> checked values, the objects and files to write), facts (hardware detection),
kubeapi (a small REST client: bootstrap token or kubeconfig), files (atomic private writes),
command (join and leave, in order, with progress). The bootstrap token's powers are set by the
chart (charts/mlxfleet/templates/join): create this Mac's Secret and InferenceNode, nothing else.
May import: the standard library, httpx, yaml, cryptography, `service_units`, `platform`.
Called by: mlxfleet_agent.cli.
"""

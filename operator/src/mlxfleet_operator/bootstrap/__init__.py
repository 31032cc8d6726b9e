"""Bootstrap tokens for `mlxfleet-agent join`: `mlxfleet token create|list|delete`.

tokens (pure: format, lifetime, the Secret kube-apiserver authenticates) and cli (the I/O).
May import: kubernetes (cli only), kubectl_plugin.kubeconfig. Called by: mlxfleet_operator.cli.
"""

"""`kubectl mlxfleet` (console script `kubectl-mlxfleet`): the fleet at a glance and the few
actions people take on it: status, approve, cordon/uncordon/drain, top, logs.

kubeconfig (which cluster, as kubectl finds it), render (pure text: bars, tables, metrics
arithmetic), agents (reads an agent's credentials and calls its control API), cli (commands).
May import: kubernetes, httpx, prometheus_client, `api`, `core.kit.naming`.
Called by: the console script, bootstrap.cli (kubeconfig).
"""

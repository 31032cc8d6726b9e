"""All I/O of the operator: the node agents' control API (httpx) and Kubernetes objects.

May import: httpx, kubernetes, kopf (events), prometheus-client, `core`, `api`, the agent
`contract`/`memory`, the standard library. Called by: `mlxfleet_operator.handlers` only. The
Kubernetes client is synchronous: every call runs in a worker thread, never on the event loop.
"""

"""All I/O of the operator: the node agents' control API (httpx), Kubernetes objects and Events,
the object store, metrics, and the runtime the handlers share.

Modules: `agent` (one agent's control API client), `fleet` (one client per node: polls and agent
requests answered as core's typed facts), `fleetview` (what decisions read of the fleet, in
memory: the last answer per node, reservations, nominations, room; `fleet.Fleet` is one),
`credentials` (each node's URL, token and CA from its labelled Secrets, checked and cached for
the fleet), `kubeapi` (the one async Kubernetes client: one pool), `kube` (the Kubernetes calls
and their errors, Secrets, SwapPlans), `publishing` (each ModelDeployment's Service +
EndpointSlices), `ownership` (which of those objects are ours), `statuspatch` (status into
kopf's patch), `events` (post core's Event values), `metrics` (Prometheus), `runtime` (settings,
kube, fleet, publisher, per-object state, in kopf's memo), `objects` (one record per object uid
of what the process remembers about it, forgotten when the object goes), `objectstore` (S3, for
reports).
May import: httpx, kubernetes (`kubeapi` alone: its config loaders), aiohttp, kopf (events), boto3,
prometheus-client, `core`, `api`, the agent `contract`, `settings`, the standard library.
Called by: handlers, `main` (the runtime) and reports (`objectstore`). Every Kubernetes call is
asynchronous, on the event loop: no worker thread.
"""

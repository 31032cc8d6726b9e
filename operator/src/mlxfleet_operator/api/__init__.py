"""The operator's domain model: the four custom resources as pydantic models, and their CRDs.

Modules: `resources` (group, version, kinds, plurals: the one source of truth for kopf decorators),
`base` (pydantic base config and ObjectMeta), `conditions` (condition types, reasons, the
metav1.Condition model), `quantity` (Kubernetes quantity parser), `fields` (shared field types:
model sources, quantities, secret references, swap strategy), `modelref` (`ModelRef`: source +
revision, the one model value from API to core to adapters), `modeldeployment`, `inferencenode`,
`swapplan`, `modelroute` (the kinds; a ModelDeployment's spec is in `deploymentspec` and
`sharding`), `schema` (pydantic JSON Schema -> structural CRD schema)
and `crdgen` (writes crds/*.yaml; `mlxfleet crds`).
May import: pydantic, PyYAML, the standard library and `mlxfleet_agent.contract`. Never I/O
libraries (kopf, kubernetes, httpx, boto3). Called by: core, adapters, handlers and the CLI.
"""

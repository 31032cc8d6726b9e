"""The kopf indexes every handler reads, and their typed view.

kopf fills them from its watches before any handler runs and passes each one to every handler
as a keyword argument named after it; `Indexes.of(kwargs)` gives handlers the typed view, so no
handler module imports another. One index per question:

- `inference_nodes`: every InferenceNode by name (placement, the SwapPlan steps' nodes).
- `deployment_slots`: every ModelDeployment by its agent slot name (two may share one).
- `swap_plans`: every SwapPlan by (namespace, deployment) (people may write them too).
- `deployment_ready`: every ModelDeployment's ready replicas by (namespace, name) (ModelRoutes).
- `model_demand`: requests gateways hold for sleeping ModelDeployments, by (namespace, name)
  (ModelDemands in the demand namespace: the autoscaler wakes on them).
- `deployment_tenants`: every whole-replica ModelDeployment as preemption sees it (priority,
  floor) by its agent slot name (a preemptor looks up the replicas on a node).

Bodies are parsed here, once per change: an object the operator's model refuses is left out
(kopf logs the error) instead of breaking every handler that reads the index. Each node seen
also updates the runtime's `NodeChanges` (what decisions read of it, its NotReady set: the
converge-skip check reads those instead of scanning every node per deployment per tick).
May import: kopf, api, core (claims, facts, preemption), adapters.runtime. Called by: kopf
(indexing), handler modules (the view).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf
import pydantic

from mlxfleet_operator.adapters import runtime
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import modeldemand as mdemand
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import resources
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core.deployment import autoscale, preemption
from mlxfleet_operator.core.deployment import claims as slot_claims
from mlxfleet_operator.core.fleet import facts
from mlxfleet_operator.core.kit import naming

NODES = (resources.GROUP, resources.VERSION, resources.INFERENCE_NODE.plural)
DEPLOYMENTS = (resources.GROUP, resources.VERSION, resources.MODEL_DEPLOYMENT.plural)
PLANS = (resources.GROUP, resources.VERSION, resources.SWAP_PLAN.plural)
DEMANDS = (resources.GROUP, resources.VERSION, resources.MODEL_DEMAND.plural)
_V = TypeVar("_V")


def forget_managed_fields(body: kopf.Body) -> None:
    """Drop `metadata.managedFields` (server-side apply's record of who set which field) from
    the body kopf keeps. kopf keeps the last body of every object it runs a timer for (each
    InferenceNode, ModelDeployment and SwapPlan), and managedFields were 15 MB of the operator's
    memory at 500 x 1,000 (1,500 bodies); neither kopf nor the operator reads them, and every
    parse here deep-copied them on every event. kopf's `Body` is a read-only view of the dict it
    keeps (`_src`); an index function sees each new body before any handler does. A kopf without
    that attribute keeps them (nothing else changes)."""
    src = getattr(body, "_src", None)
    meta = src.get("metadata") if isinstance(src, dict) else None
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def inference_nodes(
    name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> dict[str, inode.InferenceNode]:
    forget_managed_fields(body)
    node = inode.InferenceNode.model_validate(copy.deepcopy(dict(body)))
    ready = facts.NodeFacts(node=node, state=None, endpoint=None).ready
    shape = (tuple(sorted(node.metadata.labels.items())), node.spec)  # what placement filters
    memory = node.status.memory  # read only before the agent's first answer (`facts.budget`)
    reads = (shape, tuple(node.status.conditions), memory.allocatable_bytes if memory else None)
    runtime.of(memo).nodes.observe(
        name, node.metadata.resource_version, ready=ready, shape=shape, reads=reads
    )
    return {name: node}


def deployment_slots(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, slot_claims.SlotClaim]:
    forget_managed_fields(body)
    meta = body.get("metadata") or {}
    claim = slot_claims.SlotClaim(
        created=str(meta.get("creationTimestamp") or ""),
        namespace=namespace or "",
        name=name,
        uid=str(meta.get("uid") or ""),
    )
    return {naming.slot_name(namespace or "", name): claim}


def swap_plans(
    namespace: str | None, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], swp.SwapPlan]:
    forget_managed_fields(body)
    plan = swp.SwapPlan.model_validate(copy.deepcopy(dict(body)))
    return {(namespace or "", plan.spec.deployment_ref.name): plan}


def deployment_tenants(body: kopf.Body, **_: Any) -> dict[str, preemption.Tenant]:
    forget_managed_fields(body)  # (whichever of the kind's indexes kopf runs first)
    try:
        md = mdep.ModelDeployment.model_validate(copy.deepcopy(dict(body)))
    except pydantic.ValidationError:  # InvalidSpec: never placed, so nothing to evict (its
        return {}  # handler says why; a traceback per change here would say it again)
    if md.spec.sharding is not None:  # groups of ranks are never evicted
        return {}
    tenant = preemption.tenant(md)
    return {naming.slot_name(tenant.namespace, tenant.name): tenant}


def deployment_ready(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], int]:
    return {(namespace or "", name): int((body.get("status") or {}).get("readyReplicas") or 0)}


def model_demand(
    namespace: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> dict[tuple[str, str], autoscale.Want]:
    """A gateway's held requests, by the deployment they wait for (only ModelDemands in the
    demand namespace count: only the gateway's identity may write there)."""
    if namespace != runtime.of(memo).config.demand_namespace:
        return {}
    demand = mdemand.ModelDemand.model_validate(copy.deepcopy(dict(body)))
    return autoscale.wants_of(demand)


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.index(*NODES, id="inference_nodes", registry=registry)(_on_loop(inference_nodes))
    kopf.index(*DEPLOYMENTS, id="deployment_slots", registry=registry)(_on_loop(deployment_slots))
    kopf.index(*PLANS, id="swap_plans", registry=registry)(_on_loop(swap_plans))
    kopf.index(*DEPLOYMENTS, id="deployment_ready", registry=registry)(_on_loop(deployment_ready))
    kopf.index(*DEMANDS, id="model_demand", registry=registry)(_on_loop(model_demand))
    kopf.index(*DEPLOYMENTS, id="deployment_tenants", registry=registry)(
        _on_loop(deployment_tenants)
    )


def _on_loop(fn: Callable[..., _V]) -> Callable[..., Awaitable[_V]]:
    """`fn` as kopf runs it on its own loop: kopf hands a plain function to a thread pool, one
    thread hop per object change for work of a few microseconds (three per ModelDeployment
    change). The index functions stay plain functions (tests call them as such). Not
    `functools.wraps`: kopf follows `__wrapped__` to decide, and would run it in a thread."""

    async def on_loop(**kwargs: Any) -> _V:
        return fn(**kwargs)

    on_loop.__name__, on_loop.__qualname__ = fn.__name__, fn.__qualname__
    return on_loop


@dataclass(frozen=True)
class Indexes:
    """The indexes as a handler sees them (build with `of(kwargs)`)."""

    nodes: kopf.Index[str, inode.InferenceNode]
    claims: kopf.Index[str, slot_claims.SlotClaim]
    plans: kopf.Index[tuple[str, str], swp.SwapPlan]
    ready: kopf.Index[tuple[str, str], int]
    tenants: kopf.Index[str, preemption.Tenant]
    # what gateways hold per deployment (absent where no ModelDemand was indexed: unit tests)
    demand: Mapping[tuple[str, str], Iterable[autoscale.Want]] = dataclasses.field(
        default_factory=dict
    )

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> Indexes:
        return cls(
            nodes=kwargs["inference_nodes"],
            claims=kwargs["deployment_slots"],
            plans=kwargs["swap_plans"],
            ready=kwargs["deployment_ready"],
            tenants=kwargs["deployment_tenants"],
            demand=kwargs.get("model_demand", {}),
        )

    def evictable(self, slots: Iterable[str], *, below: int) -> dict[str, preemption.Tenant]:
        """Of `slots`, those of a whole-replica ModelDeployment of priority below `below` that
        preemption may evict from, by slot: one deployment per slot name (a shared one is
        nobody's), none whose SwapPlan runs (its replicas are the plan's to move)."""
        out: dict[str, preemption.Tenant] = {}
        for slot in slots:
            found = list(self.tenants.get(slot, []))
            if len(found) != 1 or found[0].priority >= below:
                continue
            tenant = found[0]
            plans = self.plans_of(tenant.namespace, tenant.name)
            if all(p.status.phase is not None and p.status.phase.terminal for p in plans):
                out[slot] = tenant
        return out

    def inference_nodes(self) -> list[inode.InferenceNode]:
        """Every InferenceNode, by name."""
        return [node for name in sorted(self.nodes) for node in self.nodes[name]]

    def slot_conflict(self, namespace: str, name: str, uid: str) -> str | None:
        """Why the deployment may not use its agent slot name (None: it may)."""
        return slot_claims.slot_conflict(self.claims, namespace=namespace, name=name, uid=uid)

    def plans_of(self, namespace: str, deployment: str) -> list[swp.SwapPlan]:
        """The SwapPlans of one ModelDeployment."""
        return list(self.plans.get((namespace, deployment), []))

    def ready_replicas(self, namespace: str) -> dict[str, int]:
        """Ready replicas of each ModelDeployment of one namespace, by name."""
        return {
            name: max(self.ready[(ns, name)])
            for ns, name in self.ready
            if ns == namespace and self.ready[(ns, name)]
        }

    def demand_of(self, namespace: str, name: str) -> list[autoscale.Want]:
        """What gateways hold for one ModelDeployment (fresh or not: core decides)."""
        return list(self.demand.get((namespace, name), []))

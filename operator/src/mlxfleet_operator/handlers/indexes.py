"""The kopf indexes every handler reads, and their typed view.

kopf fills them from its watches before any handler runs and passes each one to every handler
as a keyword argument named after it; `Indexes.of(kwargs)` gives handlers the typed view, so no
handler module imports another. One index per kind:

- `inference_nodes`: every InferenceNode by name (placement, the SwapPlan steps' nodes).
- `deployments`: every ModelDeployment by its agent slot name (two may share one), as a
  `Deployment`: its claim on the slot name (the oldest keeps it), its ready replicas (ModelRoutes,
  the autoscaler) and, for a whole-replica one, how preemption sees it (priority, floor: a
  preemptor looks up the replicas on a node). One index, not one per question: kopf runs every
  index function of a kind through its handler machinery on every change of every object (a
  state, an outcome and a patch per function), and ModelDeployments change most.
- `swap_plans`: every SwapPlan by (namespace, deployment) (people may write them too).
- `model_demand`: requests gateways hold for sleeping ModelDeployments, by (namespace, name)
  (ModelDemands in the demand namespace: the autoscaler wakes on them).

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
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf
import pydantic

from mlxfleet_operator.adapters import runtime
from mlxfleet_operator.api import deploymentspec, resources
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import modeldemand as mdemand
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


@dataclass(frozen=True, slots=True)
class Deployment:
    """One ModelDeployment as the `deployments` index holds it: its claim on its agent slot
    name, its ready replicas (`status.readyReplicas`) and how preemption sees it (None: a sharded
    one, whose groups of ranks are never evicted, or a spec the operator's model refuses, never
    placed)."""

    claim: slot_claims.SlotClaim
    ready: int
    tenant: preemption.Tenant | None


def deployments(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, Deployment]:
    forget_managed_fields(body)
    meta = body.get("metadata") or {}
    claim = slot_claims.SlotClaim(
        created=str(meta.get("creationTimestamp") or ""),
        namespace=namespace or "",
        name=name,
        uid=str(meta.get("uid") or ""),
    )
    ready = int((body.get("status") or {}).get("readyReplicas") or 0)
    tenant = _tenant(namespace or "", name, body)
    return {naming.slot_name(namespace or "", name): Deployment(claim, ready, tenant)}


def _tenant(namespace: str, name: str, body: kopf.Body) -> preemption.Tenant | None:
    """The spec alone, validated without a copy (the tenant keeps none of it): a ModelDeployment
    change cost 128 us here with the whole object copied and validated, 1 us so."""
    try:
        spec = deploymentspec.ModelDeploymentSpec.model_validate(body.get("spec"))
    except pydantic.ValidationError:  # InvalidSpec: never placed, so nothing to evict (its
        return None  # handler says why; a traceback per change here would say it again)
    if spec.sharding is not None:  # groups of ranks are never evicted
        return None
    return preemption.tenant_of(namespace, name, spec)


def swap_plans(
    namespace: str | None, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], swp.SwapPlan]:
    forget_managed_fields(body)
    plan = swp.SwapPlan.model_validate(copy.deepcopy(dict(body)))
    return {(namespace or "", plan.spec.deployment_ref.name): plan}


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
    kopf.index(*DEPLOYMENTS, id="deployments", registry=registry)(_on_loop(deployments))
    kopf.index(*PLANS, id="swap_plans", registry=registry)(_on_loop(swap_plans))
    kopf.index(*DEMANDS, id="model_demand", registry=registry)(_on_loop(model_demand))


def _on_loop(fn: Callable[..., _V]) -> Callable[..., Awaitable[_V]]:
    """`fn` as kopf runs it on its own loop: kopf hands a plain function to a thread pool, one
    thread hop per object change for work of a few microseconds. The index functions stay plain
    functions (tests call them as such). Not `functools.wraps`: kopf follows `__wrapped__` to
    decide, and would run it in a thread."""

    async def on_loop(**kwargs: Any) -> _V:
        return fn(**kwargs)

    on_loop.__name__, on_loop.__qualname__ = fn.__name__, fn.__qualname__
    return on_loop


@dataclass(frozen=True)
class Indexes:
    """The indexes as a handler sees them (build with `of(kwargs)`): kopf's `Index` is a mapping
    of each key to the collection of values indexed under it."""

    nodes: Mapping[str, Collection[inode.InferenceNode]]
    deployments: Mapping[str, Collection[Deployment]]
    plans: Mapping[tuple[str, str], Collection[swp.SwapPlan]]
    # what gateways hold per deployment (absent where no ModelDemand was indexed: unit tests)
    demand: Mapping[tuple[str, str], Collection[autoscale.Want]] = dataclasses.field(
        default_factory=dict
    )

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> Indexes:
        return cls(
            nodes=kwargs["inference_nodes"],
            deployments=kwargs["deployments"],
            plans=kwargs["swap_plans"],
            demand=kwargs.get("model_demand", {}),
        )

    def evictable(self, slots: Iterable[str], *, below: int) -> dict[str, preemption.Tenant]:
        """Of `slots`, those of a whole-replica ModelDeployment of priority below `below` that
        preemption may evict from, by slot: one deployment per slot name (a shared one is
        nobody's), none whose SwapPlan runs (its replicas are the plan's to move)."""
        out: dict[str, preemption.Tenant] = {}
        for slot in slots:
            found = [d.tenant for d in self.deployments.get(slot, ()) if d.tenant is not None]
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
        found = self.deployments.get(naming.slot_name(namespace, name), ())
        return slot_claims.slot_conflict(
            [d.claim for d in found], namespace=namespace, name=name, uid=uid
        )

    def plans_of(self, namespace: str, deployment: str) -> list[swp.SwapPlan]:
        """The SwapPlans of one ModelDeployment."""
        return list(self.plans.get((namespace, deployment), []))

    def ready_replicas(self, namespace: str) -> dict[str, int]:
        """Ready replicas of each ModelDeployment of one namespace, by name."""
        return {
            d.claim.name: d.ready
            for found in self.deployments.values()
            for d in found
            if d.claim.namespace == namespace
        }

    def ready_of(self, namespace: str, name: str) -> int:
        """Ready replicas of one ModelDeployment (0: none, or not indexed)."""
        found = self.deployments.get(naming.slot_name(namespace, name), ())
        return max(
            (d.ready for d in found if (d.claim.namespace, d.claim.name) == (namespace, name)),
            default=0,
        )

    def demand_of(self, namespace: str, name: str) -> list[autoscale.Want]:
        """What gateways hold for one ModelDeployment (fresh or not: core decides)."""
        return list(self.demand.get((namespace, name), []))

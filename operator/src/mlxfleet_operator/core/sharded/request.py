"""Placement inputs of a sharded ModelDeployment (pure): the cached copy that gives the model's
shape, the group request sized from it, each node as placement sees it (a node whose last poll
failed counts as not ready), and where each group's ranks are now.

May import: the standard library, `api`, the agent `contract` and `sizing`, `core.fleet` (`facts`,
`placement`, `nodeviews`, `groupplacement`). Called by: the sharded ModelDeployment handler (through
`core.sharded`) and `core.swapplan.groups` (the request for a step's target).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement, nodeviews, placement


def cached_model(
    md: mdep.ModelDeployment, facts: Sequence[dep.NodeFacts], model: ModelRef | None = None
) -> contract.CachedModel | None:
    """A node's cached copy of `model` (default: the spec's) whose shape is known."""
    want = model or md.model_ref()
    for f in facts:
        for c in f.state.cached_models if f.state is not None else ():
            if ModelRef.of(c) == want and c.shape is not None:
                return c
    return None


def group_request(
    md: mdep.ModelDeployment, cached: contract.CachedModel, model: ModelRef | None = None
) -> groupplacement.GroupRequest:
    """The groups the spec asks for, sized for `model` (default: the spec's)."""
    sh, shape = md.spec.sharding, cached.shape
    if sh is None or shape is None:
        raise ValueError("group_request needs spec.sharding and the model's shape")
    est = sizing.estimate(
        weights_bytes=cached.size_bytes,
        shape=shape,
        context_length=md.spec.context_length,
        max_concurrency=md.spec.max_concurrency,
        kv_bits=md.spec.server.kv_bits,
    )
    weights = est.weights_bytes
    override = md.spec.memory_bytes()  # memory per replica: the whole group, split like weights
    if override is not None:
        weights = max(override - est.kv_bytes - est.overhead_bytes * sh.size, 1)
    nodes = md.spec.placement.nodes
    return groupplacement.GroupRequest(
        groups=md.spec.replicas,
        size=sh.size,
        mode=groupplacement.Mode(sh.mode.value),
        weights_bytes=weights,
        kv_bytes=est.kv_bytes,
        overhead_bytes=est.overhead_bytes,
        num_layers=shape.num_layers,
        num_kv_heads=shape.num_kv_heads,
        model=model or md.model_ref(),
        node_selector=dict(md.spec.placement.node_selector),
        nodes=tuple(nodes) if nodes is not None else None,
    )


def node_view(
    fact: dep.NodeFacts, *, slot: str, fresh: bool, last_seen: datetime | None
) -> placement.NodeView:
    """Placement's view; a node whose last poll failed counts as not ready from then on."""
    view = nodeviews.node_view(fact, slot=slot)
    if fresh or not view.ready:
        return view
    return placement.NodeView(
        name=view.name,
        labels=view.labels,
        approved=view.approved,
        unschedulable=view.unschedulable,
        ready=False,
        not_ready_since=last_seen,
        budget_bytes=view.budget_bytes,
        used_bytes=view.used_bytes,
        cached=view.cached,
    )


def current(md: mdep.ModelDeployment) -> list[list[str]]:
    """The nodes of each group in the status, by rank (an index with no group: no nodes)."""
    by_index = {
        g.index: [r.node for r in sorted(g.ranks, key=lambda r: r.rank)] for g in md.status.groups
    }
    return [by_index.get(i, []) for i in range(max(by_index, default=-1) + 1)]

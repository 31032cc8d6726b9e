"""Each InferenceNode as placement sees it (`placement.NodeView`), made from its facts: its
pressure readings from the InferenceNode's conditions (`PRESSURES`), how warm it runs, the engines
its agent can run, its memory with a deployment's own slot left out; and the view kept per node
between reconciles (`prepare`, `views_for`).

May import: the standard library, the agent `contract`, `api`, `core.kit.thermal`, `facts`,
`placement`. Called by: `core.deployment.replicas` (a deployment's placement), `core.sharded`
(a rank's node), the fleet adapter (`prepare`, `views_for`: each node's view kept between
reconciles).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import thermal

# InferenceNode conditions that keep new replicas off a node while they are True, each with
# the placement reason it gives; the node's replicas stay.
PRESSURES: tuple[tuple[cond.ConditionType, placement.Reason], ...] = (
    (cond.ConditionType.MEMORY_PRESSURE, placement.Reason.MEMORY_PRESSURE),
    (cond.ConditionType.THERMAL_PRESSURE, placement.Reason.THERMAL_PRESSURE),
)


def pressures(node: inode.InferenceNode) -> tuple[placement.Pressure, ...]:
    """The node's pressure readings that are on (`PRESSURES`), each with its condition's words."""
    out = []
    for kind, reason in PRESSURES:
        found = cond.find(node.status.conditions, kind)
        if found is not None and found.status is cond.ConditionStatus.TRUE:
            text = found.message or f"{kind} ({found.reason}): no new replicas until it clears"
            out.append(placement.Pressure(reason=reason, message=text))
    return tuple(out)


def node_view(fact: f.NodeFacts, *, slot: str) -> placement.NodeView:
    cached = frozenset(
        ModelRef.of(c) for c in (fact.state.cached_models if fact.state is not None else ())
    )
    engines, reasons = engines_of(fact)
    return placement.NodeView(
        name=fact.name,
        engines=engines,
        engine_reasons=reasons,
        labels=dict(fact.node.metadata.labels),
        approved=fact.node.approved(),
        unschedulable=fact.node.spec.unschedulable,
        draining=fact.node.spec.drain,
        ready=fact.ready and fact.state is not None,
        not_ready_since=fact.not_ready_since,
        budget_bytes=f.budget(fact),
        used_bytes=f.used_by_others(fact, slot),
        cached=cached,
        served_names=frozenset(
            s.served_name
            for s in (fact.state.slots if fact.state is not None else ())
            if s.name != slot
        ),
        pressures=pressures(fact.node),
        # a node whose agent does not answer is out as NotReady, not for its fabric
        fabric=fact.fabric_address if fact.state is not None else "",
        warmth=thermal.warmth(fact.node.status.conditions),
    )


@dataclass(frozen=True)
class Prepared:
    """One node's placement view, made once per change of the node (its object, its agent's
    decisive answer, a reservation) instead of per deployment per reconcile: valid as is for
    every deployment whose slot the node does not count (`slots`)."""

    view: placement.NodeView  # every slot counted as another deployment's
    slots: frozenset[str]  # the slots the view counts (listed by the agent or reserved)


def prepare(fact: f.NodeFacts) -> Prepared:
    """The node's view as any deployment not on it sees it."""
    listed = fact.state.slots if fact.state is not None else ()
    counted = frozenset(s.name for s in listed) | frozenset(fact.claims)
    return Prepared(node_view(fact, slot=""), counted)


def views_for(prepared: Mapping[str, Prepared], *, slot: str) -> dict[str, placement.NodeView]:
    """The prepared views valid for `slot`'s deployment (by node; a node that counts the slot
    is left out: its view must leave the deployment's own usage out, `node_view`)."""
    return {name: p.view for name, p in prepared.items() if slot not in p.slots}


def engines_of(fact: f.NodeFacts) -> tuple[frozenset[str], dict[str, str]]:
    """What the node's agent can run, and why not the others (an agent that reports no
    engines predates them: it runs mlx-lm only)."""
    listed = fact.state.engines if fact.state is not None else []
    if not listed:
        return frozenset({contract.EngineName.MLX_LM.value}), {}
    runnable = frozenset(e.name for e in listed if e.available)
    return runnable, {e.name: e.reason for e in listed if not e.available}

"""Where a ModelDeployment's replicas go: the deployment's placement request (with the nodes it
must leave: preemption), where its replicas are now (a SwapPlan's moves applied, then the nodes
carrying or reserving its slot), the decision (`core.fleet.placement` over each node's view,
`core.fleet.nodeviews`), the nodes that may fetch and size a model nobody knows yet, and the
Event when replicas move.

May import: the standard library, the agent `contract`, `api`, `core.kit.naming`, `core.kit.events`,
`core.fleet` (`facts`, `placement`, `nodeviews`), `autoscale` (the count to place),
`candidates`. Called by: the ModelDeployment handler (`place`, `sizing_nodes`, `rescheduled`),
`intent`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import autoscale, candidates
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import nodeviews, placement
from mlxfleet_operator.core.kit import events, naming


def request(
    md: mdep.ModelDeployment, footprint_bytes: int, *, leave: Mapping[str, str] | None = None
) -> placement.Request:
    """`leave`: nodes the replicas leave and avoid, with why (`evictions.leave`)."""
    nodes = md.spec.placement.nodes
    return placement.Request(
        replicas=autoscale.wanted(md),
        footprint_bytes=footprint_bytes,
        model=md.model_ref(),
        strategy=placement.Strategy(md.spec.placement.strategy.value),
        node_selector=dict(md.spec.placement.node_selector),
        nodes=tuple(nodes) if nodes is not None else None,
        engine=md.spec.engine.name.value,
        served_name=md.served_name(),
        leave=dict(leave or {}),
    )


def current_nodes(md: mdep.ModelDeployment, moves: Mapping[str, str]) -> list[str]:
    """Where the replicas are, for placement's stability: the status's placements with a
    SwapPlan's moves applied (the replica belongs on the new node), then the nodes moved from
    (still placed: dropped unless a replica is missing, and held until the new one serves),
    then replicas already on their way out."""
    going = mdep.PlacementPhase.REMOVING
    carrying = [p.node for p in md.status.placements if p.phase != going]
    moved = [moves.get(n, n) for n in carrying]
    left = [n for n in carrying if n in moves]
    removing = [p.node for p in md.status.placements if p.phase == going]
    return list(dict.fromkeys([*moved, *left, *removing]))


def carrying(facts: Sequence[f.NodeFacts], slot: str) -> list[str]:
    """Nodes whose agent lists the slot (not Failed), by name: replicas placement keeps (after
    the status's) although the status does not name them yet. A reconcile may read the object
    as it was before an earlier reconcile's status write (the watch lags the write under load:
    at 100 nodes x 300 new deployments, every one of 85 slot DELETEs in a run came from a
    decision that saw an empty status and chose afresh, moving a replica just placed)."""
    failed = contract.SlotPhase.FAILED
    return sorted(
        fact.name
        for fact in facts
        if (listed := fact.slot(slot)) is not None and listed.phase != failed
    )


def reserving(facts: Sequence[f.NodeFacts], slot: str) -> list[str]:
    """Nodes that hold the slot's reservation (its PUT decided on, in flight or not reported
    yet) but whose agent does not list it, by name: replicas placement keeps after those
    `carrying` it. The same stale read one step earlier: a decision that saw neither the
    status nor the agent name such a node placed a replica elsewhere on top of it, one too
    many, which a later reconcile deleted again (a slot loaded for nothing). Placement's
    filters still apply: a node gone or now statically out keeps no replica."""
    return sorted(fact.name for fact in facts if slot in fact.reserved and fact.slot(slot) is None)


def place(
    md: mdep.ModelDeployment,
    facts: Sequence[f.NodeFacts],
    *,
    footprint_bytes: int,
    now: datetime,
    failover_delay: timedelta,
    moves: Mapping[str, str] | None = None,
    views: Mapping[str, placement.NodeView] | None = None,
    index: candidates.NodeIndex | None = None,
    by_name: Mapping[str, f.NodeFacts] | None = None,
    leave: Mapping[str, str] | None = None,
) -> placement.Decision:
    """`leave`: nodes the replicas leave and avoid (evicted there, or backing off), with why.
    `views`: nodes' placement views made ahead for this deployment's slot (`views_for`);
    the others are made here. `index` (with `by_name`, `facts` by name): the fleet's kept
    views, indexed: the decision is first taken on the nodes it shortlists (`candidates`)
    and, only when that leaves a replica unplaced or held on a draining node, on every node
    (the status then names each node's reason). Either way the same nodes, kept, added,
    dropped and missing as on every node; a decision that places every replica lists only
    the shortlist's rejections.
    Where the replicas are: the status's placements, then the nodes `carrying` the slot, then
    those `reserving` it."""
    slot = naming.slot_name(md.metadata.namespace or "", md.metadata.name or "")
    listed = current_nodes(md, moves or {})
    held = [*carrying(facts, slot), *reserving(facts, slot)]
    current = [*listed, *(n for n in held if n not in listed)]
    want = request(md, footprint_bytes, leave=leave)
    decision = _place(want, facts, slot, current, now, failover_delay, views, index, by_name)
    if len(current) == len(listed):
        return decision
    # a slot not kept that the status does not name goes at once, as before (no handover)
    return dataclasses.replace(decision, dropped=tuple(n for n in decision.dropped if n in listed))


def _place(
    want: placement.Request,
    facts: Sequence[f.NodeFacts],
    slot: str,
    current: list[str],
    now: datetime,
    failover_delay: timedelta,
    views: Mapping[str, placement.NodeView] | None,
    index: candidates.NodeIndex | None,
    by_name: Mapping[str, f.NodeFacts] | None,
) -> placement.Decision:
    if index is not None:
        lookup = by_name if by_name is not None else {fact.name: fact for fact in facts}
        own = index.counting(slot)
        names = index.shortlist(want, keep=[*current, *own])
        short = [_view(n, lookup[n], index, own, slot) for n in sorted(names) if n in lookup]
        decision = placement.place(want, short, current, now=now, failover_delay=failover_delay)
        if not decision.missing and not decision.held:
            return decision
        views = {n: v for n in lookup if n not in own and (v := index.view(n)) is not None}
    made = views or {}
    views_ = [made.get(fact.name) or nodeviews.node_view(fact, slot=slot) for fact in facts]
    return placement.place(want, views_, current, now=now, failover_delay=failover_delay)


def _view(
    name: str,
    fact: f.NodeFacts,
    index: candidates.NodeIndex,
    own: frozenset[str],
    slot: str,
) -> placement.NodeView:
    """The node's kept view, or one made for `slot` (a node that counts it, or not indexed)."""
    kept = index.view(name) if name not in own else None
    return kept if kept is not None else nodeviews.node_view(fact, slot=slot)


def sizing_nodes(
    md: mdep.ModelDeployment, facts: Sequence[f.NodeFacts], *, now: datetime
) -> tuple[tuple[str, ...], placement.Decision]:
    """Before the size is known: nodes that pass every filter but memory, best first (one of
    them fetches and sizes the model), and the decision (`fits_nowhere`: nothing matches)."""
    decision = place(md, facts, footprint_bytes=0, now=now, failover_delay=timedelta(0))
    spare = tuple(r.node for r in decision.rejections if r.reason == placement.Reason.NOT_NEEDED)
    return (*decision.nodes, *spare), decision


def rescheduled(md: mdep.ModelDeployment, decision: placement.Decision) -> events.Event | None:
    """Replicas that move off their nodes now (dropped, not already on their way out) to the
    nodes just added: the Event to post once, when the move starts (None: nothing moves)."""
    removing = {p.node for p in md.status.placements if p.phase == mdep.PlacementPhase.REMOVING}
    moved = [n for n in decision.dropped if n not in removing]
    if not moved or not decision.added:
        return None
    text = f"replicas moved from {', '.join(moved)} to {', '.join(decision.added)}"
    return events.Event(reason="Rescheduled", message=text)

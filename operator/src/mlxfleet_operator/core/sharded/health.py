"""Health of the ranks of sharded groups (pure): whether a rank of a formation is ready, still
starting or failed, whether the group watch counts it lost, and which groups are broken.

A group is broken when a rank of its formation failed (the agent stopped it: a peer was lost) or
its node stopped answering: it leaves the endpoints at once, the survivors' slots are deleted,
and it re-forms under a new id (on the same nodes when they are all healthy, else after the
failover delay on healthy ones). A group whose SwapPlan step runs is never broken here: the plan
follows it.

May import: the standard library, the agent `contract`, `api`, `core.fleet.facts`,
`core.sharded.formation`. Called by: the sharded ModelDeployment handler (reconcile and group
watch, through `core.sharded`) and `core.sharded.groupstatus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mlxfleet_agent import contract
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.sharded.formation import Governed


@dataclass(frozen=True)
class RankHealth:
    ready: bool
    failed: bool
    message: str | None


def _observed(
    fact: dep.NodeFacts | None, slot: str
) -> tuple[contract.SlotStatus | None, contract.RankSpec | None]:
    """The node's slot as its agent last reported it, and the rank that slot runs (if any)."""
    observed = fact.slot(slot) if fact is not None else None
    shard = observed.spec.shard if observed is not None and observed.spec is not None else None
    return observed, shard


def rank_health(fact: dep.NodeFacts | None, *, slot: str, group_id: str, fresh: bool) -> RankHealth:
    """A rank of formation `group_id`: ready (running; rank 0: serving; while its slot swaps,
    only once the serving backend is this formation's: the swap switched), failed (its node is
    lost or the agent stopped it), or still starting."""
    if fact is None or not fact.ready or not fresh:
        return RankHealth(False, True, "node is not answering")
    observed, shard = _observed(fact, slot)
    if observed is None or shard is None or shard.group != group_id:
        return RankHealth(False, False, "starting")
    if observed.phase == contract.SlotPhase.FAILED:
        return RankHealth(False, True, observed.last_error or "rank failed")
    if observed.active_swap is not None and observed.serving_group != group_id:
        return RankHealth(False, False, "swapping")  # its old rank may still serve
    if observed.ready:
        return RankHealth(True, False, None)
    return RankHealth(False, False, f"{observed.phase.value.lower()}")


def rank_lost(fact: dep.NodeFacts | None, *, slot: str, group_id: str, fresh: bool) -> bool:
    """For the group watch: the rank of formation `group_id` stopped serving (its node does not
    answer, its slot is gone, failed or not ready: its agent saw a peer lost). A slot that a
    SwapPlan step moved to a new formation and that still serves (the old rank until the switch,
    then the new one) is not lost: the next reconcile watches the new formation."""
    health = rank_health(fact, slot=slot, group_id=group_id, fresh=fresh)
    if health.ready or health.failed:
        return health.failed
    observed, shard = _observed(fact, slot)
    moved = shard is not None and shard.group != group_id
    return not (moved and observed is not None and observed.ready)


def broken_groups(
    md: mdep.ModelDeployment,
    facts: Mapping[str, dep.NodeFacts],
    fresh: frozenset[str],
    *,
    slot: str,
    governed: Governed | None = None,
) -> frozenset[int]:
    """Groups of the current status whose formation lost a rank, or that a failed SwapPlan step
    left broken; never one whose step runs (the plan follows it)."""
    out = set()
    failed = governed.failed if governed is not None else {}
    swapping = governed.swapping if governed is not None else frozenset()
    for g in md.status.groups:
        if g.index in swapping:
            continue
        if failed.get(g.index) == g.id:
            out.add(g.index)
            continue
        for r in g.ranks:
            h = rank_health(facts.get(r.node), slot=slot, group_id=g.id, fresh=r.node in fresh)
            if h.failed:
                out.add(g.index)
    return frozenset(out)

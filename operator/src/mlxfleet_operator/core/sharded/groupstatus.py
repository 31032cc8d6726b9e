"""Status of a sharded ModelDeployment (pure): each group with its ranks, one placement per
group (rank 0's node), the endpoints (only rank 0 of each group is published, ready when every
rank is; while its SwapPlan step runs, when rank 0's agent serves: the old formation until the
switch, not during a Hold), groups waiting out the failover delay, and the kstatus verdict.

May import: the standard library, `api`, `core.kit.conditions`, `core.kit.naming`, `core.fleet`,
`core.deployment`, `core.sharded.formation` and `health`. Called by: the sharded ModelDeployment
handler (through `core.sharded`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.kit import conditions, naming
from mlxfleet_operator.core.sharded import health
from mlxfleet_operator.core.sharded.formation import Formation

R = cond.Reason


@dataclass(frozen=True)
class Result:
    status: mdep.ModelDeploymentStatus
    endpoints: tuple[tuple[str, str, bool], ...]  # (node, url, ready): rank 0 of each group


def status(
    md: mdep.ModelDeployment,
    *,
    decision: groupplacement.GroupDecision,
    forms: Sequence[Formation],
    facts: Mapping[str, dep.NodeFacts],
    fresh: frozenset[str],
    outcomes: Mapping[str, dep.Outcome],
    endpoint: str,
    now: datetime,
    reforming: frozenset[int],
    slot: str,
    plan: plans.PlanInfo | None = None,
) -> Result:
    """Status with each group's ranks; rank 0 of each group in the endpoints, ready when every
    rank is, or, while its SwapPlan step runs, when rank 0's agent serves (the old formation
    until the switch; not during a Hold)."""
    groups: list[mdep.GroupStatus] = []
    placements: list[mdep.PlacementStatus] = []
    eps: list[tuple[str, str, bool]] = []
    before = {g.index: g for g in md.status.groups}
    swapping = plan.swapping if plan is not None and plan.active else frozenset()
    for f in forms:
        ranks = _ranks(f, facts, fresh, outcomes, slot=slot)
        ready = all(r.ready for r in ranks)
        old = before.get(f.index)
        groups.append(
            mdep.GroupStatus(
                index=f.index,
                id=f.id,
                ready=ready,
                source=f.model.source,
                revision=f.model.revision,
                broken_at=old.broken_at if old is not None and old.id == f.id else None,
                ranks=ranks,
            )
        )
        placements.append(_placement(f, ranks, ready=ready))
        leader = ranks[0]
        serving = ready
        if f.index in swapping:
            lead = facts.get(leader.node)
            observed = lead.slot(slot) if lead is not None else None
            serving = observed is not None and observed.ready and leader.node in fresh
        if leader.endpoint:
            eps.append((leader.node, leader.endpoint, serving))
    placed = {f.index for f in forms}
    for index in sorted(reforming - placed):  # waiting out the failover delay: keep its ranks
        old = before.get(index)
        if old is None:
            continue
        group = _reforming(old, now=now)
        groups.append(group)
        if group.ranks and group.ranks[0].endpoint:
            eps.append((group.ranks[0].node, group.ranks[0].endpoint, False))
    groups.sort(key=lambda g: g.index)
    ready_groups = sum(1 for g in groups if g.ready)
    judged = verdict(md, decision, groups, outcomes, reforming, plan=plan)
    new = mdep.ModelDeploymentStatus(
        observed_generation=md.metadata.generation,
        conditions=conditions.apply_verdict(
            md.status.conditions, judged, generation=md.metadata.generation, now=now
        ),
        served_name=md.served_name(),
        replicas=len(groups),
        desired_replicas=md.spec.replicas,  # groups (a sharded deployment has no autoscaler)
        ready_replicas=ready_groups,
        placements=placements,
        groups=groups,
        estimated_memory_bytes=sum(r.memory_bytes for r in decision.groups[0].ranks)
        if decision.groups
        else md.status.estimated_memory_bytes,
        endpoint=endpoint,
        selector=naming.deployment_selector(md.metadata.name or ""),
        swap_plan=plan.name if plan is not None else md.status.swap_plan,
    )
    return Result(status=new, endpoints=tuple(eps))


def _ranks(
    f: Formation,
    facts: Mapping[str, dep.NodeFacts],
    fresh: frozenset[str],
    outcomes: Mapping[str, dep.Outcome],
    *,
    slot: str,
) -> list[mdep.RankStatus]:
    """Each rank of formation `f` as its agent reports it (an agent's refusal of its slot is
    the message); rank 0's endpoint is its agent's data plane, the others' their ring address."""
    ranks = []
    for r in f.plan.ranks:
        fact = facts.get(r.node)
        h = health.rank_health(fact, slot=slot, group_id=f.id, fresh=r.node in fresh)
        out = outcomes.get(r.node)
        ranks.append(
            mdep.RankStatus(
                rank=r.rank,
                node=r.node,
                ready=h.ready,
                endpoint=fact.endpoint if fact is not None and r.rank == 0 else f.hosts[r.rank],
                memory_bytes=r.memory_bytes,
                message=out.error if out is not None and out.error else h.message,
            )
        )
    return ranks


def _placement(
    f: Formation, ranks: Sequence[mdep.RankStatus], *, ready: bool
) -> mdep.PlacementStatus:
    """The group as one placement, on rank 0's node; not ready, it names the ranks waited for."""
    leader = ranks[0]
    return mdep.PlacementStatus(
        node=leader.node,
        phase=mdep.PlacementPhase.READY if ready else mdep.PlacementPhase.LOADING,
        ready=ready,
        source=f.model.source,
        revision=f.model.revision,
        endpoint=leader.endpoint,
        message=None if ready else "; ".join(
            f"rank {r.rank} on {r.node}: {r.message}" for r in ranks if not r.ready
        ),
    )  # fmt: skip


def _reforming(old: mdep.GroupStatus, *, now: datetime) -> mdep.GroupStatus:
    """A group waiting out the failover delay: its last ranks, none ready, broken since `now`
    unless it already was."""
    ranks = [
        r.model_copy(update={"ready": False, "message": "group is re-forming"}) for r in old.ranks
    ]
    return old.model_copy(
        update={"ready": False, "ranks": ranks, "broken_at": old.broken_at or now.isoformat()}
    )


def verdict(
    md: mdep.ModelDeployment,
    decision: groupplacement.GroupDecision,
    groups: Sequence[mdep.GroupStatus],
    outcomes: Mapping[str, dep.Outcome],
    reforming: frozenset[int],
    *,
    plan: plans.PlanInfo | None = None,
) -> conditions.Verdict:
    want = md.spec.replicas
    ready = sum(1 for g in groups if g.ready)
    if decision.unsplittable is not None:
        return conditions.Verdict(
            False, R.SHARDING_UNSUPPORTED, decision.unsplittable, stalled=True
        )
    refused = [o for o in outcomes.values() if o.refused]
    if refused:
        text = "; ".join(f"{o.node}: {o.error}" for o in refused)
        return conditions.Verdict(False, R.SPEC_REJECTED, text, stalled=True)
    if want == 0:
        return conditions.Verdict(True, R.SCALED_TO_ZERO, "spec.replicas is 0")
    if plan is not None and plan.active and plan.target == md.model_ref():
        reason = R.AWAITING_APPROVAL if plan.paused else R.SWAP_IN_PROGRESS
        text = f"{ready}/{want} groups ready; SwapPlan {plan.name} {plan.phase or 'created'}"
        if plan.swapping:
            text += f", swapping group(s) {sorted(plan.swapping)}"
        settled = plan.paused and ready >= want  # awaiting approval, the old model serving
        return conditions.Verdict(settled, reason, text, reconciling=not settled)
    if ready >= want:
        return conditions.Verdict(True, R.READY, f"{ready}/{want} groups ready")
    if reforming:
        text = (
            f"{ready}/{want} groups ready; re-forming group(s) {sorted(reforming)}: a rank was lost"
        )
        return conditions.Verdict(False, R.GROUP_REFORMING, text, reconciling=True)
    if decision.missing:
        text = (
            f"{ready}/{want} groups ready; {decision.missing} group(s) of "
            f"{md.spec.sharding.size if md.spec.sharding else 1} nodes found no room: "
            f"{decision.rejection_summary()}"
        )
        return conditions.Verdict(False, R.WAITING_FOR_CAPACITY, text, reconciling=True)
    return conditions.Verdict(
        False, R.LOADING, f"{ready}/{want} groups ready; ranks loading", reconciling=True
    )

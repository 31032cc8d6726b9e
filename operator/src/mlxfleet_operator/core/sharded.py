"""Sharded ModelDeployment decisions (pure): the group request from the model's size, each
group's formation (id, ranks, ring addresses), each rank's slot spec, group health and the
status (groups with their ranks; only rank 0's endpoint is published, ready when every rank is).

May import: the standard library, `api`, the agent `contract` and `sizing`, sibling core modules.
Called by: the sharded ModelDeployment handler (`handlers.sharded`).

A formation has an id (`g<index>-<epoch>`); agents run a rank until its id changes. A group is
broken when a rank of its formation failed (the agent stopped it: a peer was lost) or its node
stopped answering: it leaves the endpoints at once, the survivors' slots are deleted, and it
re-forms under a new id (on the same nodes when they are all healthy, else after the failover
delay on healthy ones). A kept group keeps its model: a model change goes through a SwapPlan
(`plan_due`, `new_plan`), whose group steps (`core.swapplan.groups`) write the new formation's
ranks; while a step runs, its group is the plan's (`Governed`): not re-formed, not PUT here, and
published ready while rank 0's agent serves (the old formation until the switch).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import conditions, naming, placement, sharding
from mlxfleet_operator.core.deployment import facts as dep
from mlxfleet_operator.core.deployment import placing, slots
from mlxfleet_operator.core.deployment import plan as plans

# Ring ports stay below every OS's ephemeral range (Linux 32768-60999, macOS 49152-65535): a
# port there may be held by any outgoing connection (or its TIME_WAIT) and the rank's bind
# fails (EADDRINUSE; seen in e2e runs on a busy machine).
PORT_BASE = 20_000
PORT_SPAN = 750  # x 16 ports per group (ranks): 20000-31999
R = cond.Reason


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
) -> sharding.GroupRequest:
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
    return sharding.GroupRequest(
        groups=md.spec.replicas,
        size=sh.size,
        mode=sharding.Mode(sh.mode.value),
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
    view = placing.node_view(fact, slot=slot)
    if fresh or not view.ready:
        return view
    return placement.NodeView(
        name=view.name,
        labels=view.labels,
        unschedulable=view.unschedulable,
        ready=False,
        not_ready_since=last_seen,
        budget_bytes=view.budget_bytes,
        used_bytes=view.used_bytes,
        cached=view.cached,
    )


def current(md: mdep.ModelDeployment) -> list[list[str]]:
    by_index = {
        g.index: [r.node for r in sorted(g.ranks, key=lambda r: r.rank)] for g in md.status.groups
    }
    return [by_index.get(i, []) for i in range(max(by_index, default=-1) + 1)]


def epoch(group_id: str | None) -> int:
    try:
        return int((group_id or "").rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


@dataclass(frozen=True)
class Formation:
    index: int
    id: str
    plan: sharding.GroupPlan
    hosts: tuple[str, ...]  # ring address per rank
    model: ModelRef  # what its ranks load


def next_id(index: int, old: str | None) -> str:
    """The id of group `index`'s next formation (`old`: its current id)."""
    return f"g{index}-{epoch(old) + 1}"


def hosts(
    facts: Mapping[str, dep.NodeFacts], nodes: Sequence[str], *, slot: str, group_id: str
) -> tuple[str, ...]:
    """The ring address of each rank of formation `group_id` on `nodes` (by rank)."""
    return tuple(
        f"{ring_host(facts[n])}:{ring_port(slot, group_id, rank)}" for rank, n in enumerate(nodes)
    )


@dataclass(frozen=True)
class Governed:
    """What a deployment's governing SwapPlan says about its groups (`plans.PlanInfo.groups`)."""

    pinned: Mapping[int, tuple[str, ModelRef, tuple[str, ...]]]  # index -> id, model, nodes
    swapping: frozenset[int]  # groups whose step runs: the plan writes their ranks
    failed: Mapping[int, str]  # index -> the formation id a failed step left broken
    open: bool = False  # a plan runs (or waits): it alone changes the kept groups

    def writes(self, form: Formation, broken: frozenset[int]) -> bool:
        """The plan writes this group's ranks, not the deployment: its step runs, or a plan is
        open and the group is kept (a step's PUT the plan has not recorded yet must never be
        overwritten with the old formation). A group re-forming after a loss is the
        deployment's."""
        if form.index in self.swapping:
            return True
        return self.open and form.plan.kept and form.index not in broken

    @classmethod
    def of(cls, md: mdep.ModelDeployment, plan: plans.PlanInfo | None) -> Governed:
        """A step's formation applies while the plan runs, and afterwards until the status
        shows it (then the group is kept as any other)."""
        if plan is None:
            return cls({}, frozenset(), {})
        shown = {g.index: ModelRef(g.source or "", g.revision) for g in md.status.groups}
        pinned = {i: p for i, p in plan.groups.items() if plan.active or shown.get(i) != p[1]}
        swapping = plan.swapping if plan.active else frozenset()
        return cls(pinned, swapping, plan.failed_groups, open=plan.active)


def ring_port(slot: str, group_id: str, rank: int) -> int:
    digest = hashlib.sha256(f"{slot}/{group_id}".encode()).digest()
    return PORT_BASE + (int.from_bytes(digest[:4], "big") % PORT_SPAN) * 16 + rank


def ring_host(fact: dep.NodeFacts) -> str:
    """The address other ranks reach this node on: the host of its agent URL."""
    host = urlsplit(fact.node.spec.agent.url).hostname or "localhost"
    return f"[{host}]" if ":" in host else host


def formations(
    md: mdep.ModelDeployment,
    decision: sharding.GroupDecision,
    facts: Mapping[str, dep.NodeFacts],
    broken: frozenset[int],
    *,
    slot: str,
    governed: Governed | None = None,
) -> list[Formation]:
    """Each placed group's formation: the one its SwapPlan step formed (`governed`); else its
    old id and model while kept and healthy (a model change is a SwapPlan's); else a new one on
    the spec's model."""
    before = {g.index: g for g in md.status.groups}
    pinned = governed.pinned if governed is not None else {}
    out = []
    for plan in decision.groups:
        old = before.get(plan.index)
        step = pinned.get(plan.index)
        if step is not None and step[2] == plan.nodes:
            gid, model = step[0], step[1]
        elif old is not None and plan.kept and plan.index not in broken:
            gid, model = old.id, ModelRef(old.source or md.model_ref().source, old.revision)
        else:
            gid, model = next_id(plan.index, old.id if old else None), md.model_ref()
        addresses = hosts(facts, plan.nodes, slot=slot, group_id=gid)
        out.append(Formation(index=plan.index, id=gid, plan=plan, hosts=addresses, model=model))
    return out


def forming(
    forms: Sequence[Formation],
    facts: Mapping[str, dep.NodeFacts],
    fresh: frozenset[str],
    governed: Governed,
    *,
    slot: str,
    broken: frozenset[int] = frozenset(),
) -> dict[str, ModelRef]:
    """The nodes (answering) about to get a rank of a new formation, with the model it loads:
    they should copy the weights first (from peers). A group a SwapPlan writes is the plan's
    (it prefetches on every rank's node itself)."""
    out: dict[str, ModelRef] = {}
    for f in forms:
        if governed.writes(f, broken):
            continue
        for r in f.plan.ranks:
            fact = facts.get(r.node)
            if fact is None or r.node not in fresh:
                continue
            observed = fact.slot(slot)
            spec = observed.spec if observed is not None else None
            if spec is None or spec.shard is None or spec.shard.group != f.id:
                out[r.node] = f.model
    return out


def plan_due(
    md: mdep.ModelDeployment, forms: Sequence[Formation], plan: plans.PlanInfo | None
) -> bool:
    """A kept group serves another model than the spec's, and no plan covers that change."""
    target = md.model_ref()
    if not any(f.model != target for f in forms):
        return False
    return plan is None or (not plan.active and plan.target != target)


def new_plan(md: mdep.ModelDeployment, forms: Sequence[Formation]) -> swp.SwapPlan:
    """The SwapPlan for the spec's model change: a step per group not on it (rank 0's node)."""
    target = md.model_ref()
    return plans.new_plan(md, [f.plan.nodes[0] for f in forms if f.model != target])


def rank_spec(
    md: mdep.ModelDeployment,
    formation: Formation,
    rank: sharding.RankPlan,
    *,
    strategy: contract.SwapStrategy | None = None,
    drain_timeout_seconds: int | None = None,
) -> contract.SlotSpec:
    sh = md.spec.sharding
    assert sh is not None
    base = slots.slot_spec(
        md, formation.model, strategy=strategy, drain_timeout_seconds=drain_timeout_seconds
    )
    shard = contract.RankSpec(
        group=formation.id,
        rank=rank.rank,
        world_size=len(formation.plan.ranks),
        hosts=list(formation.hosts),
        backend=sh.to_agent_backend(),
        mode=sh.to_agent_mode(),
    )
    return base.model_copy(update={"shard": shard, "memory_bytes": rank.memory_bytes})


@dataclass(frozen=True)
class RankHealth:
    ready: bool
    failed: bool
    message: str | None


def rank_health(fact: dep.NodeFacts | None, *, slot: str, group_id: str, fresh: bool) -> RankHealth:
    """A rank of formation `group_id`: ready (running; rank 0: serving), failed (its node is
    lost or the agent stopped it), or still starting."""
    if fact is None or not fact.ready or not fresh:
        return RankHealth(False, True, "node is not answering")
    observed = fact.slot(slot)
    shard = observed.spec.shard if observed is not None and observed.spec is not None else None
    if observed is None or shard is None or shard.group != group_id:
        return RankHealth(False, False, "starting")
    if observed.phase == contract.SlotPhase.FAILED:
        return RankHealth(False, True, observed.last_error or "rank failed")
    if observed.active_swap is not None:  # its old rank may still serve: not this formation
        return RankHealth(False, False, "swapping")
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
    observed = fact.slot(slot) if fact is not None else None
    shard = observed.spec.shard if observed is not None and observed.spec is not None else None
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


@dataclass(frozen=True)
class Result:
    status: mdep.ModelDeploymentStatus
    endpoints: tuple[tuple[str, str, bool], ...]  # (node, url, ready): rank 0 of each group


def status(
    md: mdep.ModelDeployment,
    *,
    decision: sharding.GroupDecision,
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
        source, revision = f.model.source, f.model.revision
        ranks = []
        for r in f.plan.ranks:
            fact = facts.get(r.node)
            h = rank_health(fact, slot=slot, group_id=f.id, fresh=r.node in fresh)
            out = outcomes.get(r.node)
            message = out.error if out is not None and out.error else h.message
            url = fact.endpoint if fact is not None and r.rank == 0 else f.hosts[r.rank]
            ranks.append(
                mdep.RankStatus(
                    rank=r.rank,
                    node=r.node,
                    ready=h.ready,
                    endpoint=url,
                    memory_bytes=r.memory_bytes,
                    message=message,
                )
            )
        ready = all(r.ready for r in ranks)
        old = before.get(f.index)
        broken_at = old.broken_at if old is not None and old.id == f.id else None
        groups.append(
            mdep.GroupStatus(
                index=f.index,
                id=f.id,
                ready=ready,
                source=source,
                revision=revision,
                broken_at=broken_at,
                ranks=ranks,
            )
        )
        leader = ranks[0]
        phase = mdep.PlacementPhase.READY if ready else mdep.PlacementPhase.LOADING
        placements.append(
            mdep.PlacementStatus(
                node=leader.node,
                phase=phase,
                ready=ready,
                source=source,
                revision=revision,
                endpoint=leader.endpoint,
                message=None if ready else "; ".join(
                    f"rank {r.rank} on {r.node}: {r.message}" for r in ranks if not r.ready
                ),
            )
        )  # fmt: skip
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
        ranks = [
            r.model_copy(update={"ready": False, "message": "group is re-forming"})
            for r in old.ranks
        ]
        groups.append(
            old.model_copy(
                update={
                    "ready": False,
                    "ranks": ranks,
                    "broken_at": old.broken_at or now.isoformat(),
                }
            )
        )
        if ranks and ranks[0].endpoint:
            eps.append((ranks[0].node, ranks[0].endpoint, False))
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


def verdict(
    md: mdep.ModelDeployment,
    decision: sharding.GroupDecision,
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

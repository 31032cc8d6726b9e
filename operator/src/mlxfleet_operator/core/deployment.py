"""ModelDeployment reconcile decisions (pure): the footprint, placement inputs, the slot each node
should run, which slots go, whether a SwapPlan is due, and the resulting status and conditions.

May import: the standard library, `api`, the agent `contract` and `sizing`, sibling core modules.
Called by: the ModelDeployment handler, with `NodeFacts` built from the InferenceNode index and
the latest agent answers, and `Outcome`s of the slot requests it just made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.api import base, resources
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core import naming, placement
from mlxfleet_operator.core import swapplan as plans

Model = tuple[str, str | None]  # (source, revision)


@dataclass(frozen=True)
class NodeFacts:
    """One InferenceNode as the operator knows it: the object, and the agent's last answer."""

    node: inode.InferenceNode
    state: contract.AgentState | None
    endpoint: str | None  # the agent's data-plane base URL

    @property
    def name(self) -> str:
        return self.node.metadata.name or ""

    @property
    def ready(self) -> bool:
        return cond.is_true(self.node.status.conditions, cond.ConditionType.READY)

    @property
    def not_ready_since(self) -> datetime | None:
        found = cond.find(self.node.status.conditions, cond.ConditionType.READY)
        if found is None or found.status is cond.ConditionStatus.TRUE:
            return None
        return found.last_transition_time

    def slot(self, name: str) -> contract.SlotStatus | None:
        if self.state is None:
            return None
        return next((s for s in self.state.slots if s.name == name), None)


@dataclass(frozen=True)
class PlanInfo:
    """The SwapPlan named in the deployment's status, as far as the deployment cares."""

    name: str
    target: Model
    phase: swp.SwapPhase | None
    paused: bool
    # nodes whose model the plan's steps changed (or reverted), and what each now serves
    serving: Mapping[str, Model] = field(default_factory=dict)
    moves: Mapping[str, str] = field(default_factory=dict)  # replica from node -> to node
    holds: frozenset[str] = frozenset()  # nodes where the plan is bringing up a replica
    message: str | None = None
    created: str | None = None  # creationTimestamp (ISO), to order plans
    started: bool = False  # a step ran (a plan refused up front changed nothing)

    @property
    def active(self) -> bool:
        return self.phase is None or not self.phase.terminal

    @classmethod
    def from_plan(cls, plan: swp.SwapPlan) -> PlanInfo:
        target = (plan.spec.target.source, plan.spec.target.revision)
        # the failed step first (the cause), then a revert that failed too
        failed = sorted(
            (
                s
                for s in plan.status.steps
                if s.phase in (swp.StepPhase.ROLLED_BACK, swp.StepPhase.FAILED)
            ),
            key=lambda s: s.phase != swp.StepPhase.ROLLED_BACK,
        )
        message = None
        if failed:
            whys = "; ".join(f"step on {s.node}: {s.message or s.phase}" for s in failed)
            message = f"SwapPlan {plan.metadata.name} {whys}"
        return cls(
            name=plan.metadata.name or "",
            target=target,
            phase=plan.status.phase,
            paused=plan.spec.paused,
            serving=plans.serving(plan.status.steps, target),
            moves=plans.moves(plan.status.steps),
            holds=plans.moving_to(plan.status.steps),
            message=message,
            created=ts.isoformat() if (ts := plan.metadata.creation_timestamp) else None,
            started=any(s.started_at is not None for s in plan.status.steps),
        )


def governing(plans: Sequence[swp.SwapPlan], *, named: str | None) -> PlanInfo | None:
    """The SwapPlan that governs a deployment's replicas: a running one (the one in
    status.swapPlan first, else the oldest, e.g. written by a person), else the one named in
    status (finished: its completed steps say which replicas already moved)."""
    infos = sorted(
        (PlanInfo.from_plan(p) for p in plans),
        key=lambda i: (i.name != named, i.created or "", i.name),
    )
    active = [i for i in infos if i.active]
    if active:
        return active[0]
    return next((i for i in infos if i.name == named), None)


# Agent answers that no retry can change (a person must edit the spec): malformed (400),
# outside the allowed roots (403), no such model (404), taken or being deleted (409), invalid
# field (422). Everything else (507: no room now; 502/503: the source could not be fetched now;
# no answer at all) is worth retrying.
PERMANENT_STATUSES = frozenset({400, 403, 404, 409, 422})
SOURCE_FIELDS = frozenset({"source", "revision"})


def refusal_is_permanent(status: int | None) -> bool:
    """An agent answer (HTTP status; None: no answer) that retrying cannot change."""
    return status in PERMANENT_STATUSES


@dataclass(frozen=True)
class Outcome:
    """What happened when the handler asked one node's agent for the slot."""

    node: str
    error: str | None = None
    status: int | None = None  # the agent's HTTP status, if it answered with an error
    field: str | None = None  # the field its error body names

    @property
    def refused(self) -> bool:
        """The request cannot work as is (bad source, invalid field, name taken, ...)."""
        return refusal_is_permanent(self.status)

    @property
    def no_fit(self) -> bool:
        """507: the agent's own memory check refused it (busy node)."""
        return self.status == 507

    @property
    def source_problem(self) -> bool:
        """The refusal is about the model source (else another field of the spec)."""
        return self.field in SOURCE_FIELDS or self.status in (403, 404)


# ------------------------------------------------------------------------------- footprint


def spec_model(md: mdep.ModelDeployment) -> Model:
    return (md.spec.model.source, md.spec.model.revision)


def footprint(
    md: mdep.ModelDeployment,
    facts: Sequence[NodeFacts],
    extra: Sequence[contract.CachedModel] = (),
) -> int:
    """Bytes per replica: spec.resources.memory, else the shared estimate from any node that has
    the weights cached (size + shape; `extra`: a prefetch answer). Raises
    sizing.UnknownModelSize when nobody knows yet."""
    override = md.spec.memory_bytes()
    if override is not None:
        return override
    source, revision = spec_model(md)
    known = [c for f in facts if f.state is not None for c in f.state.cached_models]
    for cached in [*extra, *known]:
        if (cached.source, cached.revision) != (source, revision) or cached.shape is None:
            continue
        if cached.size_bytes <= 0:
            continue
        est = sizing.estimate(
            weights_bytes=cached.size_bytes,
            shape=cached.shape,
            context_length=md.spec.context_length,
            max_concurrency=md.spec.max_concurrency,
            kv_bits=md.spec.server.kv_bits,
        )
        return est.total_bytes
    raise sizing.UnknownModelSize(f"size of {source} is not known on any node yet")


def budget(fact: NodeFacts) -> int:
    """What placement may fill on the node: the agent's own budget (`memory.budgetBytes` of its
    last answer; before the first answer after a restart, what status last said). The agent
    admits slots against that number (507 above it), so it is the only one: placement never
    promises what the agent would refuse. Set it on the Mac (agent `memory_budget`)."""
    if fact.state is not None:
        return fact.state.memory.budget_bytes
    mem = fact.node.status.memory
    return (mem.allocatable_bytes or 0) if mem is not None else 0


def used_by_others(fact: NodeFacts, slot: str) -> int:
    if fact.state is None:
        return 0
    return sum(s.estimated_memory_bytes or 0 for s in fact.state.slots if s.name != slot)


def node_view(fact: NodeFacts, *, slot: str) -> placement.NodeView:
    cached = frozenset(
        placement.model_key(c.source, c.revision)
        for c in (fact.state.cached_models if fact.state is not None else ())
    )
    return placement.NodeView(
        name=fact.name,
        labels=dict(fact.node.metadata.labels),
        unschedulable=fact.node.spec.unschedulable,
        draining=fact.node.spec.drain,
        ready=fact.ready and fact.state is not None,
        not_ready_since=fact.not_ready_since,
        budget_bytes=budget(fact),
        used_bytes=used_by_others(fact, slot),
        cached=cached,
    )


def request(md: mdep.ModelDeployment, footprint_bytes: int) -> placement.Request:
    nodes = md.spec.placement.nodes
    return placement.Request(
        replicas=md.spec.replicas,
        footprint_bytes=footprint_bytes,
        model=placement.model_key(*spec_model(md)),
        strategy=placement.Strategy(md.spec.placement.strategy.value),
        node_selector=dict(md.spec.placement.node_selector),
        nodes=tuple(nodes) if nodes is not None else None,
    )


def place(
    md: mdep.ModelDeployment,
    facts: Sequence[NodeFacts],
    *,
    footprint_bytes: int,
    now: datetime,
    failover_delay: timedelta,
    moves: Mapping[str, str] | None = None,
) -> placement.Decision:
    slot = naming.slot_name(md.metadata.namespace or "", md.metadata.name or "")
    current = current_nodes(md, moves or {})
    views = [node_view(f, slot=slot) for f in facts]
    return placement.place(
        request(md, footprint_bytes), views, current, now=now, failover_delay=failover_delay
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


def sizing_nodes(
    md: mdep.ModelDeployment, facts: Sequence[NodeFacts], *, now: datetime
) -> tuple[tuple[str, ...], placement.Decision]:
    """Before the size is known: nodes that pass every filter but memory, best first (one of
    them fetches and sizes the model), and the decision (`fits_nowhere`: nothing matches)."""
    decision = place(md, facts, footprint_bytes=0, now=now, failover_delay=timedelta(0))
    spare = tuple(r.node for r in decision.rejections if r.reason == placement.Reason.NOT_NEEDED)
    return (*decision.nodes, *spare), decision


# ---------------------------------------------------------------------------- desired slots


def slot_spec(
    md: mdep.ModelDeployment,
    model: Model,
    *,
    strategy: contract.SwapStrategy | None = None,
    drain_timeout_seconds: int | None = None,
) -> contract.SlotSpec:
    """The agent slot for this deployment serving `model` (deterministic: same input, same spec)."""
    policy = md.spec.swap.to_agent()
    if strategy is not None:
        policy = policy.model_copy(update={"strategy": strategy})
    if drain_timeout_seconds is not None:
        policy = policy.model_copy(update={"drain_timeout_seconds": drain_timeout_seconds})
    return contract.SlotSpec(
        source=model[0],
        revision=model[1],
        served_name=md.served_name(),
        context_length=md.spec.context_length,
        max_concurrency=md.spec.max_concurrency,
        memory_bytes=md.spec.memory_bytes(),
        server=md.spec.server.to_agent(),
        swap=policy,
    )


def desired_models(
    md: mdep.ModelDeployment, decision: placement.Decision, plan: PlanInfo | None
) -> dict[str, Model]:
    """What each chosen node should serve: a kept replica keeps its model until a SwapPlan step
    moved it (or a rollback moved it back); a new replica starts on the spec's model."""
    previous = {p.node: (p.source, p.revision) for p in md.status.placements if p.source}
    out: dict[str, Model] = {}
    for node in decision.nodes:
        model = previous.get(node, spec_model(md)) if node in decision.kept else spec_model(md)
        if plan is not None and node in plan.serving:
            model = plan.serving[node]
        out[node] = (model[0] or md.spec.model.source, model[1])
    return out


def nodes_to_put(decision: placement.Decision, plan: PlanInfo | None) -> tuple[str, ...]:
    """While a plan runs it alone writes the slots of the replicas it swaps (the kept ones)."""
    if plan is not None and plan.active:
        return decision.added
    return decision.nodes


@dataclass(frozen=True)
class Handover:
    """Make-before-break for replicas that placement no longer wants but that still serve.

    `leaving`: kept serving (and in the endpoints) until every chosen replica serves and was
    published ready by an earlier reconcile; `retiring`: out of the endpoints now, the slot is
    deleted on the next reconcile (so clients that read the EndpointSlice have moved on)."""

    leaving: tuple[str, ...] = ()
    retiring: tuple[str, ...] = ()

    @property
    def held(self) -> tuple[str, ...]:
        return (*self.leaving, *self.retiring)


def _serving(fact: NodeFacts | None, slot: str) -> bool:
    observed = fact.slot(slot) if fact is not None else None
    return bool(fact is not None and fact.ready and observed is not None and observed.ready)


def serves(fact: NodeFacts | None, slot: str, model: Model, plan: PlanInfo | None) -> bool:
    """The replica counts as ready: its node is Ready, its slot is ready, and the slot serves
    `model` (or the target of a running plan that is swapping it). A slot left over with another
    model (an agent restored an older desired state) is converging, not ready."""
    if not _serving(fact, slot):
        return False
    observed = fact.slot(slot) if fact is not None else None
    if observed is None:
        return False
    serving = (observed.source, observed.revision)
    return serving == model or (plan is not None and plan.active and serving == plan.target)


def handover(
    md: mdep.ModelDeployment,
    decision: placement.Decision,
    facts: Mapping[str, NodeFacts],
    *,
    slot: str,
) -> Handover:
    """Which dropped replicas stay for now. A dropped replica on a node that is gone or not
    serving goes at once (failover); one that serves stays until its replacements serve."""
    before = {p.node: p for p in md.status.placements}
    published = all(
        _serving(facts.get(n), slot) and n in before and before[n].ready for n in decision.nodes
    )
    leaving: list[str] = []
    retiring: list[str] = []
    for node in decision.dropped:
        if not _serving(facts.get(node), slot):
            continue
        prev = before.get(node)
        was_retiring = (
            prev is not None and prev.phase == mdep.PlacementPhase.REMOVING and not prev.ready
        )
        if was_retiring:
            continue  # unpublished by the previous reconcile: delete the slot now
        if published:
            retiring.append(node)
        else:
            leaving.append(node)
    return Handover(leaving=tuple(leaving), retiring=tuple(retiring))


def slots_to_delete(
    facts: Sequence[NodeFacts],
    decision: placement.Decision,
    *,
    slot: str,
    held: Sequence[str] = (),
) -> tuple[str, ...]:
    """Nodes (answering now) that still run this deployment's slot but carry no replica (and
    are not held for a make-before-break handover)."""
    return tuple(
        f.name
        for f in facts
        if f.name not in decision.nodes
        and f.name not in held
        and f.ready
        and f.slot(slot) is not None
    )


def plan_due(
    md: mdep.ModelDeployment,
    desired: Mapping[str, Model],
    decision: placement.Decision,
    plan: PlanInfo | None,
) -> bool:
    """A kept replica serves another model than the spec's, and no plan covers that change."""
    target = spec_model(md)
    if not any(desired[n] != target for n in decision.kept):
        return False
    return plan is None or (not plan.active and plan.target != target)


def new_plan(md: mdep.ModelDeployment, decision: placement.Decision) -> swp.SwapPlan:
    source, revision = spec_model(md)
    generation = md.metadata.generation or 0
    name = naming.swap_plan_name(md.metadata.name or "", source, revision, generation=generation)
    return swp.SwapPlan(
        metadata=base.ObjectMeta(
            name=name,
            namespace=md.metadata.namespace,
            labels=naming.deployment_labels(md.metadata.name or ""),
            annotations={resources.DEPLOYMENT_ANNOTATION: md.metadata.name or ""},
        ),
        spec=swp.SwapPlanSpec(
            deployment_ref=swp.DeploymentRef(name=md.metadata.name or ""),
            target=swp.SwapTarget(source=source, revision=revision),
            nodes=sorted(decision.kept),
            paused=md.spec.swap.approval == mdep.SwapApproval.MANUAL,
        ),
    )


# ------------------------------------------------------------------------ slot name claims


@dataclass(frozen=True, order=True)
class SlotClaim:
    """A ModelDeployment whose agent slot name is `slot`, ordered oldest first."""

    created: str  # creationTimestamp (ISO 8601, UTC: sorts as text)
    namespace: str
    name: str
    uid: str = field(compare=False)


def slot_owner(claims: Sequence[SlotClaim]) -> SlotClaim | None:
    """Of the deployments whose slot names are equal (a hash collision), the one that keeps the
    slot: the oldest (then by namespace and name, so every operator replica agrees)."""
    return min(claims) if claims else None


def slot_conflict(
    claims: Mapping[str, Iterable[SlotClaim]], *, namespace: str, name: str, uid: str
) -> str | None:
    """Why this deployment may not use its slot name: another one (in `claims`, every
    deployment by slot name) had it first."""
    slot = naming.slot_name(namespace, name)
    owner = slot_owner(list(claims.get(slot, ())))
    if owner is None or owner.uid == uid:
        return None
    return (
        f"agent slot name {slot} is already used by ModelDeployment {owner.namespace}/{owner.name} "
        "(long names that start alike can share one): rename this ModelDeployment"
    )

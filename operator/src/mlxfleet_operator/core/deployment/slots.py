"""A ModelDeployment's desired agent slots: what each chosen node should serve, which slot
requests to send, which replicas count as serving, the make-before-break hand-over of replicas
placement dropped, and which slots go.

May import: the standard library, `api`, the agent `contract`, `core.kit.events`,
`core.fleet` (`facts`, `placement`), `plan`. Called by: `intent`, `status`,
`core.swapplan.requests` (`slot_spec`) and the ModelDeployment handler.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from mlxfleet_agent import contract
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment.plan import PlanInfo
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import events


def slot_spec(
    md: mdep.ModelDeployment,
    model: ModelRef,
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
        source=model.source,
        revision=model.revision,
        served_name=md.served_name(),
        context_length=md.spec.context_length,
        max_concurrency=md.spec.max_concurrency,
        memory_bytes=md.spec.memory_bytes(),
        server=md.spec.server.to_agent(),
        engine=md.spec.engine,
        swap=policy,
    )


def desired_models(
    md: mdep.ModelDeployment, decision: placement.Decision, plan: PlanInfo | None
) -> dict[str, ModelRef]:
    """What each chosen node should serve: a kept replica keeps its model until a SwapPlan step
    moved it (or a rollback moved it back); a new replica starts on the spec's model."""
    spec = md.model_ref()
    previous = {p.node: ModelRef(p.source, p.revision) for p in md.status.placements if p.source}
    out: dict[str, ModelRef] = {}
    for node in decision.nodes:
        model = previous.get(node, spec) if node in decision.kept else spec
        if plan is not None and node in plan.serving:
            model = plan.serving[node]
        out[node] = model
    return out


def nodes_to_put(decision: placement.Decision, plan: PlanInfo | None) -> tuple[str, ...]:
    """While a plan runs it alone writes the slots of the replicas it swaps (the kept ones)."""
    if plan is not None and plan.active:
        return decision.added
    return decision.nodes


def requests(
    md: mdep.ModelDeployment,
    decision: placement.Decision,
    plan: PlanInfo | None,
    desired: Mapping[str, ModelRef],
    facts: Mapping[str, f.NodeFacts],
    *,
    slot: str,
) -> tuple[f.SlotRequest, ...]:
    """The slot PUTs to send: to each Ready node this reconcile writes (`nodes_to_put`) whose
    agent does not run exactly the desired spec already."""
    out = []
    for node in nodes_to_put(decision, plan):
        fact = facts.get(node)
        if fact is None or not fact.ready:
            continue
        spec = slot_spec(md, desired[node])
        observed = fact.slot(slot)
        if observed is None or observed.spec != spec:
            out.append(f.SlotRequest(node, spec))
    return tuple(out)


def _serving(fact: f.NodeFacts | None, slot: str) -> bool:
    observed = fact.slot(slot) if fact is not None else None
    return bool(fact is not None and fact.ready and observed is not None and observed.ready)


def serves(fact: f.NodeFacts | None, slot: str, model: ModelRef, plan: PlanInfo | None) -> bool:
    """The replica counts as ready: its node is Ready, its slot is ready, and the slot serves
    `model` (or the target of a running plan that is swapping it). A slot left over with another
    model (an agent restored an older desired state) is converging, not ready."""
    if not _serving(fact, slot):
        return False
    observed = fact.slot(slot) if fact is not None else None
    if observed is None:
        return False
    serving = ModelRef.of(observed)
    return serving == model or (plan is not None and plan.active and serving == plan.target)


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


def handover(
    md: mdep.ModelDeployment,
    decision: placement.Decision,
    facts: Mapping[str, f.NodeFacts],
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
    facts: Sequence[f.NodeFacts],
    decision: placement.Decision,
    *,
    slot: str,
    held: Sequence[str] = (),
    among: Collection[str] | None = None,
) -> tuple[str, ...]:
    """Nodes (answering now) that still run this deployment's slot but carry no replica (and
    are not held for a make-before-break handover). `among`: the only nodes that may run it
    (e.g. `candidates.NodeIndex.counting`), in place of asking every node."""
    if among is not None:
        facts = [fact for fact in facts if fact.name in among] if len(among) < len(facts) else facts
    return tuple(
        fact.name
        for fact in facts
        if fact.name not in decision.nodes
        and fact.name not in held
        and fact.ready
        and fact.slot(slot) is not None
    )


def held(handover: Handover, plan: PlanInfo | None) -> tuple[str, ...]:
    """Nodes whose slot stays although no replica is placed there: dropped replicas still
    handing over, and nodes where a running plan is bringing a replica up."""
    return (*handover.held, *(plan.holds if plan is not None and plan.active else ()))


def not_removed(outcome: f.Outcome, *, reported: bool) -> events.Event | None:
    """The warning for a slot DELETE that failed where it matters: the agent refused, or did
    not answer while its last report listed the slot (`reported`); an agent that does not answer
    and never reported the slot has nothing to drop."""
    if outcome.error is None or (outcome.unreachable and not reported):
        return None
    text = f"{outcome.node}: {outcome.error}"
    return events.Event(reason="SlotNotRemoved", message=text, warning=True)

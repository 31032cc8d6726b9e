"""What one ModelDeployment reconcile sets out to do, decided in one pure step once the model's
size is known: where the replicas go, what each serves, the SwapPlan to create for a model change,
the slot PUTs and DELETEs to send, which dropped replicas hand over first, and the Event a move
posts. The handler performs it (create, PUT, DELETE), then judges the status from the answers.

May import: the standard library, `api`, the kit (`events`, `naming`), `core.fleet`
(`facts`, `placement`), `candidates`, `replicas`, `plan`, `slots`. Called by: the ModelDeployment
handler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import candidates, replicas, slots
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import events, naming


@dataclass(frozen=True)
class Intent:
    decision: placement.Decision
    desired: dict[str, ModelRef]  # what each chosen node should serve
    plan: plans.PlanInfo | None  # the plan governing the replicas (after `create`, if any)
    create: swp.SwapPlan | None  # a SwapPlan to create for the spec's model change
    handover: slots.Handover
    puts: tuple[f.SlotRequest, ...]
    deletes: tuple[str, ...]  # nodes whose slot goes (no replica there, not held)
    rescheduled: events.Event | None  # replicas start moving to other nodes


def intent(
    md: mdep.ModelDeployment,
    facts: Sequence[f.NodeFacts],
    *,
    plan: plans.PlanInfo | None,
    footprint_bytes: int,
    now: datetime,
    failover_delay: timedelta,
    views: Mapping[str, placement.NodeView] | None = None,
    index: candidates.NodeIndex | None = None,
    leave: Mapping[str, str] | None = None,
) -> Intent:
    """`views`: placement views made ahead for this slot (`nodeviews.views_for`), by node;
    `index`: the fleet's kept views indexed, to decide on the nodes it shortlists; `leave`:
    nodes the replicas leave and avoid, with why (`evictions.leave`)."""
    slot = naming.slot_name(md.metadata.namespace or "", md.metadata.name or "")
    by_name = {fact.name: fact for fact in facts}
    decision = replicas.place(
        md,
        facts,
        footprint_bytes=footprint_bytes,
        now=now,
        failover_delay=failover_delay,
        moves=plan.moves if plan is not None else None,
        views=views,
        index=index,
        by_name=by_name,
        leave=leave,
    )
    desired = slots.desired_models(md, decision, plan)
    create = None
    if plans.plan_due(md, desired, decision, plan):
        create = plans.new_plan(md, sorted(decision.kept))
        plan = plans.created(md, create)
    handover = slots.handover(md, decision, by_name, slot=slot)
    held = slots.held(handover, plan)
    return Intent(
        decision=decision,
        desired=desired,
        plan=plan,
        create=create,
        handover=handover,
        puts=slots.requests(md, decision, plan, desired, by_name, slot=slot),
        deletes=slots.slots_to_delete(
            facts,
            decision,
            slot=slot,
            held=held,
            among=index.counting(slot) if index is not None else None,
        ),
        rescheduled=replicas.rescheduled(md, decision),
    )

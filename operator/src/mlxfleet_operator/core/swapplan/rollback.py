"""SwapPlan rollback: after a step failed, swap the completed steps back to what each of them
swapped from (recorded in the step, so this survives a restart), one node at a time, last
completed first, with the same agent swap; then end the plan `RolledBack` with the failed
step's reason. A revert that itself fails ends the plan `Failed` with both reasons.

May import: the standard library, `api`, the agent `contract`, `clocks`, `state`, `steps`.
Called by: `progress` (a step failed, or the plan is already `RollingBack`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import clocks
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import steps

Phase = swp.SwapPhase
StepPhase = swp.StepPhase


def cause(failed: swp.SwapStep) -> str:
    return f"step on {failed.node} failed and was rolled back: {failed.message or failed.phase}"


def _before(step: swp.SwapStep) -> ModelRef:
    """What a revertible step's node served before it (what the revert goes back to)."""
    return ModelRef(step.from_source or "", step.from_revision)


def _put_previous(step: swp.SwapStep) -> st.PutPrevious:
    request = step.revert.request_id if step.revert is not None else None
    return st.PutPrevious(step.replaces or step.node, _before(step), request)


def _with_revert(
    step: swp.SwapStep, record: contract.SwapRecord, slot: st.NodeSlot, now: datetime
) -> swp.SwapStep:
    """The revert's timeline and counters from the agent's record, on the operator's clock."""
    began = step.revert.started_at if step.revert is not None else None
    ended = None
    if record.finished_at is not None:
        ended = clocks.to_operator(record.finished_at, slot.offset, floor=began, ceiling=now)
    revert = swp.StepRevert(
        started_at=began or clocks.to_operator(record.started_at, slot.offset, ceiling=now),
        finished_at=ended,
        request_id=step.revert.request_id if step.revert is not None else None,
        requests_served=record.requests_served,
        requests_failed=record.requests_failed,
    )
    return st.update(step, revert=revert)


def _failed(state: st.PlanState, plan: list[swp.SwapStep], now: datetime, why: str) -> st.PlanState:
    return replace(state, phase=Phase.FAILED, steps=tuple(plan), completed_at=now, message=why)


def _reverting(
    state: st.PlanState,
    plan: list[swp.SwapStep],
    i: int,
    slot: st.NodeSlot,
    why: str,
    now: datetime,
) -> st.Advance | None:
    """Follow the revert of plan[i] (updated in place). None: it finished, look at the next."""
    step = plan[i]
    rolling = replace(state, phase=Phase.ROLLING_BACK)
    doing = f"{why}; reverting {step.node}"
    if step.replaces is not None:  # a move goes back: the replica returns to step.replaces
        if slot.model == _before(step) and slot.ready:
            plan[i] = st.update(
                step, phase=StepPhase.REVERTED, message=f"moved back to {step.replaces}"
            )
            return None
        back_there = slot.model is not None and slot.model.source == step.from_source
        if slot.failed is not None and back_there:
            broke = f"replica on {step.replaces} failed: {slot.failed}"
            plan[i] = st.update(step, phase=StepPhase.FAILED, message=f"revert failed: {broke}")
            return st.Advance(_failed(state, plan, now, f"{doing} failed: {broke}"), ())
        resend = (_put_previous(step),) if slot.model is None else ()
        return st.Advance(replace(rolling, steps=tuple(plan), message=doing), resend)
    since = step.revert.started_at if step.revert is not None else None
    request = step.revert.request_id if step.revert is not None else None
    record = steps.record_to(slot, _before(step), request, since)
    if record is None:  # not started on the agent yet (or lost in a restart): (re)send it
        return st.Advance(replace(rolling, message=doing), (_put_previous(step),))
    step = _with_revert(step, record, slot, now)
    if record.outcome is None:
        plan[i] = step
        return st.Advance(replace(rolling, steps=tuple(plan), message=doing), ())
    if record.outcome != contract.SwapOutcome.COMPLETED:
        broke = record.reason or record.outcome.value
        plan[i] = st.update(step, phase=StepPhase.FAILED, message=f"revert failed: {broke}")
        before = steps.origin(record)  # keep the agent on what it still serves
        back: tuple[st.Action, ...] = (st.PutPrevious(step.node, before),) if before else ()
        return st.Advance(_failed(state, plan, now, f"{doing} failed: {broke}"), back)
    plan[i] = st.update(step, phase=StepPhase.REVERTED, message=f"reverted to {step.from_source}")
    return None


def roll_back(
    state: st.PlanState, *, slots: Mapping[str, st.NodeSlot], now: datetime
) -> st.Advance:
    """Revert the completed steps one node at a time (last completed first), then end the plan
    `RolledBack` with the failed step's reason; a failed revert ends it `Failed`."""
    plan = list(state.steps)
    failed = next((s for s in plan if s.phase == StepPhase.ROLLED_BACK), None)
    why = cause(failed) if failed is not None else (state.message or "a step failed")
    rolling = replace(state, phase=Phase.ROLLING_BACK)
    for i, step in enumerate(plan):
        if step.phase != StepPhase.REVERTING:
            continue
        slot = slots.get(step.replaces or step.node)
        if slot is None or not slot.reachable:
            waiting = f"{why}; reverting {step.node}: waiting for the node to answer"
            return st.Advance(replace(rolling, message=waiting), ())
        followed = _reverting(state, plan, i, slot, why, now)
        if followed is not None:
            return followed
    todo = [i for i in reversed(range(len(plan))) if steps.revertible(plan[i])]
    if not todo:
        reverted = [s.node for s in plan if s.phase == StepPhase.REVERTED]
        message = why + (f"; reverted {', '.join(reverted)}" if reverted else "")
        done = replace(
            state, phase=Phase.ROLLED_BACK, steps=tuple(plan), completed_at=now, message=message
        )
        return st.Advance(done, ())
    i = todo[0]
    step = plan[i]
    if step.replaces is not None:
        undo = f"moving back to {step.replaces}"
    else:
        slot = slots.get(step.node)
        if slot is None or not slot.reachable:
            message = f"{why}; reverting {step.node}: waiting for the node to answer"
            return st.Advance(replace(rolling, steps=tuple(plan), message=message), ())
        if slot.model is None or slot.serves(_before(step)):
            nothing = (
                "no replica on this node" if slot.model is None else "already on the previous model"
            )
            plan[i] = st.update(step, phase=StepPhase.REVERTED, message=st.SKIPPED + nothing)
            return roll_back(replace(rolling, steps=tuple(plan)), slots=slots, now=now)
        undo = f"reverting to {step.from_source}"
    revert = swp.StepRevert(
        started_at=now, request_id=steps.request_id(state.plan_id, i, revert=True)
    )
    plan[i] = st.update(step, phase=StepPhase.REVERTING, revert=revert, message=undo)
    return st.Advance(
        replace(rolling, steps=tuple(plan), message=f"{why}; reverting {step.node}"),
        (_put_previous(plan[i]),),
    )

"""SwapPlan progress: `advance`, one step of the state machine, and the order of the plans of one
deployment.

`advance` folds fresh observations into the plan's state and says what to send to agents; it
never repeats a finished step, and re-sending the running step's desired slot is harmless (the
agent's API is declarative).
A sharded deployment's plan has a step per group (`groups`): it starts with the group's decision
(Surge or Hold, and why), asks every rank's agent for the new formation (`PutGroup`) and follows
rank 0's swap record; a failed group step is not reverted (its group re-forms).
May import: the standard library, `api`, the agent `contract`, `state`, `steps`, `rollback`,
`groups`. Called by: the SwapPlan handler (through `gate` for its inputs).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.swapplan import groups as grouped
from mlxfleet_operator.core.swapplan import rollback, steps
from mlxfleet_operator.core.swapplan import state as st

Phase = swp.SwapPhase
StepPhase = swp.StepPhase


def _running_move(
    step: swp.SwapStep, slot: st.NodeSlot | None, target: ModelRef, now: datetime
) -> tuple[swp.SwapStep, bool, tuple[st.Action, ...]]:
    """Follow a move step: the new replica on step.node loads the target from scratch (no swap
    record). Returns the new step, whether it failed, and the actions."""
    if slot is None or not slot.reachable:
        return st.update(step, message=st.waiting_for_node(step.node)), False, ()
    if slot.model == target and slot.ready:
        done = st.update(
            step, phase=StepPhase.COMPLETED, finished_at=now, message=f"moved from {step.replaces}"
        )
        return done, False, ()
    if slot.failed is not None and slot.model is not None and slot.model.source == target.source:
        why = f"new replica failed: {slot.failed}"
        return st.update(step, phase=StepPhase.ROLLED_BACK, finished_at=now, message=why), True, ()
    resend: tuple[st.Action, ...] = (st.PutTarget(step.node),) if slot.model is None else ()
    loading = f"new replica loading (replacing {step.replaces})"
    return st.update(step, message=loading), False, resend


def _running(
    state: st.PlanState,
    step: swp.SwapStep,
    slot: st.NodeSlot | None,
    target: ModelRef,
    now: datetime,
) -> tuple[swp.SwapStep, st.PlanState | None, tuple[st.Action, ...]]:
    """Follow the running step. Returns the new step, the plan state once the step failed (to be
    rolled back), and the actions."""
    if slot is None or not slot.reachable:
        return st.update(step, message=st.waiting_for_node(step.node)), None, ()
    record = steps.record_to(slot, target, step.request_id, step.started_at)
    said = f"{step.strategy_reason}; " if step.group is not None else ""  # surge or hold, why
    if record is None:
        # No record yet: (re)send the desired slot; the agent's API is declarative: harmless.
        resend: st.Action = (
            st.PutTarget(step.node, step.request_id)
            if step.group is None
            else st.PutGroup(step.group, step.request_id)
        )
        return st.update(step, message=f"{said}swap requested"), None, (resend,)
    step = steps.with_record(step, record, slot.offset, now)
    finished_at = step.finished_at or now
    if record.outcome == contract.SwapOutcome.COMPLETED:
        done = st.update(
            step, phase=StepPhase.COMPLETED, finished_at=finished_at, message=step.strategy_reason
        )
        return done, None, ()
    if record.outcome is None:
        return st.update(step, message=f"{said}swapping"), None, ()
    why = record.reason or record.outcome.value
    step = st.update(step, phase=StepPhase.ROLLED_BACK, finished_at=finished_at, message=why)
    failing = replace(state, phase=Phase.ROLLING_BACK, message=rollback.cause(step))
    before = steps.origin(record)
    back: tuple[st.Action, ...] = ()
    if before and step.group is None:  # a group's rank 0 went back on its own
        back = (st.PutPrevious(step.node, before),)
    return step, failing, back


def waiting_for(
    name: str, created: datetime | None, others: Sequence[tuple[str, datetime | None, bool]]
) -> str | None:
    """Plans of one deployment run one after another: the name of an older plan that is still
    running (others: (name, creationTimestamp, running)), if this plan must wait for it."""
    mine = (created or datetime.max.replace(tzinfo=UTC), name)
    older = sorted(
        (c or datetime.max.replace(tzinfo=UTC), n)
        for n, c, running in others
        if running and n != name and (c or datetime.max.replace(tzinfo=UTC), n) < mine
    )
    return older[0][1] if older else None


def advance(
    state: st.PlanState,
    *,
    target: ModelRef,
    nodes: Sequence[str],
    paused: bool,
    slots: Mapping[str, st.NodeSlot],
    now: datetime,
    replicas: Sequence[str] | None = None,
    allowed: Sequence[str] | None = None,
    known: Collection[str] | None = None,
    groups: grouped.Planning | None = None,
) -> st.Advance:
    """One step of the plan: fold observations into the state and say what to send to agents.

    `replicas`: the nodes carrying the deployment's replicas, when listed nodes without one
    should get one moved there (a person's plan with spec.nodes); `allowed`: the deployment's
    explicit spec.placement.nodes, which such a move must respect; `known`: the InferenceNodes
    that exist (a step for another node is skipped); `groups`: a sharded deployment's groups
    and each one's decision (a step per group)."""
    if state.phase.terminal:
        return st.Advance(state, ())
    if state.phase == Phase.ROLLING_BACK:
        return rollback.roll_back(state, slots=slots, now=now)  # runs even when paused
    if not state.steps:
        if not nodes:
            failed = replace(
                state, phase=Phase.FAILED, completed_at=now, message="no nodes to swap"
            )
            return st.Advance(failed, ())
        clash = None
        if replicas is not None and allowed:
            clash = steps.conflicts(nodes, replicas, allowed)
        if clash is not None:
            failed = replace(
                state,
                phase=Phase.FAILED,
                completed_at=now,
                message=clash,
                reason=cond.Reason.PLACEMENT_CONFLICT,
            )
            return st.Advance(failed, ())
        if groups is not None:
            state = replace(state, steps=grouped.initial_steps(nodes, groups.groups, known))
        else:
            state = replace(state, steps=steps.initial_steps(nodes, replicas, known))
    plan = list(state.steps)
    actions: tuple[st.Action, ...] = ()
    for i, step in enumerate(plan):
        if step.phase not in st.RUNNING:
            continue
        if step.replaces is not None:
            new_step, broke, actions = _running_move(step, slots.get(step.node), target, now)
            failing = replace(state, phase=Phase.ROLLING_BACK) if broke else None
        else:
            new_step, failing, actions = _running(state, step, slots.get(step.node), target, now)
        plan[i] = new_step
        if failing is not None:
            rolled = rollback.roll_back(replace(failing, steps=tuple(plan)), slots=slots, now=now)
            return st.Advance(rolled.state, actions + rolled.actions)
        if new_step.phase in st.RUNNING:
            phase = Phase.PAUSED if paused else Phase.PROGRESSING
            return st.Advance(replace(state, phase=phase, steps=tuple(plan)), actions)
    state = replace(state, steps=tuple(plan))
    pending = [i for i, s in enumerate(plan) if s.phase == StepPhase.PENDING]
    if paused and (pending or not state.started):  # nothing runs before approval
        return st.Advance(replace(state, phase=Phase.PAUSED, message=_paused(state)), ())
    if not pending:
        return st.Advance(_finished(state, now), ())
    i = pending[0]
    step = plan[i]
    again = functools.partial(
        _again, target=target, nodes=nodes, paused=paused, slots=slots, now=now, known=known,
        groups=groups,
    )  # fmt: skip
    if known is not None and step.node not in known:  # deleted since the plan was made
        plan[i] = st.skipped(step, st.unknown(step.node))
        return again(state, plan)
    slot = slots.get(step.node)
    if slot is None or not slot.reachable:
        waiting = replace(
            state,
            phase=Phase.PROGRESSING,
            started_at=state.started_at or now,
            message=st.waiting_for_node(step.node),
        )
        return st.Advance(waiting, ())
    if step.replaces is not None:  # a new replica here, in place of the one on step.replaces
        old = slots.get(step.replaces)
        before = old.model if old is not None else None
        plan[i] = st.update(
            step,
            phase=StepPhase.LOADING,
            started_at=now,
            message=f"new replica requested (replacing {step.replaces})",
            from_source=before.source if before is not None else None,
            from_revision=before.revision if before is not None else None,
        )
    elif slot.model is None:  # nothing to do here: skip it and take the next
        plan[i] = st.skipped(step, "no replica on this node")
        return again(state, plan)
    elif slot.serves(target):  # its goal already holds
        plan[i] = st.update(step, phase=StepPhase.COMPLETED, finished_at=now, message=st.ON_TARGET)
        return again(state, plan)
    elif step.group is not None:  # a sharded group swaps as a unit
        decision = groups.decisions.get(step.group) if groups is not None else None
        if not isinstance(decision, grouped.Decision):
            why = decision or "waiting for the deployment's groups"
            plan[i] = st.update(step, message=why)
            waiting = replace(
                state,
                phase=Phase.PROGRESSING,
                steps=tuple(plan),
                started_at=state.started_at or now,
                message=f"group {step.group}: {why}",
            )
            return st.Advance(waiting, ())
        plan[i] = st.update(
            step,
            phase=StepPhase.LOADING,
            started_at=now,
            message=f"{decision.reason}; swap requested",
            from_source=slot.model.source,
            from_revision=slot.model.revision,
            request_id=steps.request_id(state.plan_id, i),
            group_id=decision.group_id,
            strategy=decision.strategy,
            strategy_reason=decision.reason,
        )
    else:  # its id is in the step (status) before any operator sends it
        plan[i] = st.update(
            step,
            phase=StepPhase.LOADING,
            started_at=now,
            message="swap requested",
            from_source=slot.model.source,
            from_revision=slot.model.revision,
            request_id=steps.request_id(state.plan_id, i),
        )
    running = replace(
        state,
        phase=Phase.PROGRESSING,
        steps=tuple(plan),
        started_at=state.started_at or now,
        message=None,
    )
    put: st.Action = (
        st.PutTarget(step.node, plan[i].request_id)
        if step.group is None
        else st.PutGroup(step.group, plan[i].request_id)
    )
    return st.Advance(running, (put,))


def _again(
    state: st.PlanState,
    plan: list[swp.SwapStep],
    *,
    target: ModelRef,
    nodes: Sequence[str],
    paused: bool,
    slots: Mapping[str, st.NodeSlot],
    now: datetime,
    known: Collection[str] | None,
    groups: grouped.Planning | None,
) -> st.Advance:
    """Advance again after a step finished without running (skipped, or already on target)."""
    return advance(
        replace(state, steps=tuple(plan)),
        target=target,
        nodes=nodes,
        paused=paused,
        slots=slots,
        now=now,
        known=known,
        groups=groups,
    )


def _skips(state: st.PlanState) -> str:
    return "; ".join(f"{s.node}: {s.message}" for s in state.steps if s.phase == StepPhase.SKIPPED)


def _paused(state: st.PlanState) -> str:
    skipped = _skips(state)
    return "paused: set spec.paused=false to run" + (f" (skipped: {skipped})" if skipped else "")


def _finished(state: st.PlanState, now: datetime) -> st.PlanState:
    """No step left: Completed when a step reached the target, else nothing was done (every
    step skipped) and the plan says so."""
    if any(s.phase == StepPhase.COMPLETED for s in state.steps):
        return replace(state, phase=Phase.COMPLETED, completed_at=now, message=None)
    return replace(
        state,
        phase=Phase.FAILED,
        completed_at=now,
        message=f"no step had anything to do: {_skips(state)}",
        reason=cond.Reason.NOTHING_TO_DO,
    )

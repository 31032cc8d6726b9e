"""SwapPlan progress as a pure state machine, fed by what the agents report.

A plan runs its steps one node at a time. A step that can do nothing (its node carries no
replica, or there is no such InferenceNode) is `Skipped` with the reason; a plan whose every step
was skipped ends `Failed` (`NothingToDo`), never `Completed`. A paused plan that has not started
stays `Paused` until it is approved, whatever its steps would do. When a step fails (the agent
rolled that node back), the plan goes `RollingBack`: its completed steps are swapped back to the
model each of them swapped from (recorded in the step, so this survives a restart), one node at a
time, last completed first, with the same agent swap; then the plan ends `RolledBack` with the
failed step's reason. A revert that itself fails ends the plan `Failed` with both reasons.

May import: the standard library, `api` and the agent `contract` (swap records). Called by: the
SwapPlan handler, which stores the returned `PlanState` in the plan's status and performs the
returned actions (an idempotent `PUT /v1/slots/{name}`). Because every decision is recomputed
from the status plus fresh observations, an operator killed mid-plan resumes without repeating a
step: finished steps are never re-run, and re-sending the running step's desired slot is harmless.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import fields
from mlxfleet_operator.api import swapplan as api

# A record belongs to a step when it started after the step did (agent and operator clocks may
# differ a little; plans for the same target are minutes apart in practice).
CLOCK_SKEW = timedelta(seconds=120)


PlanPhase = api.SwapPhase
StepPhase = api.StepPhase
Step = api.SwapStep
TERMINAL = frozenset({PlanPhase.COMPLETED, PlanPhase.FAILED, PlanPhase.ROLLED_BACK})
RUNNING = frozenset({StepPhase.LOADING, StepPhase.WARMING, StepPhase.SWITCHING, StepPhase.DRAINING})
SKIPPED = "skipped: "  # message prefix of a revert that had nothing to do (Reverted)
ON_TARGET = "already on target"  # a Completed step that had nothing to change
Model = tuple[str, str | None]  # (source, revision)


@dataclass(frozen=True)
class PlanState:
    """The operator-owned part of SwapPlan status (conditions are derived from it)."""

    phase: PlanPhase = PlanPhase.PENDING
    steps: tuple[Step, ...] = ()
    started_at: datetime | None = None
    completed_at: datetime | None = None
    message: str | None = None
    reason: cond.Reason | None = None  # why it ended, when the phase alone does not say

    @property
    def progress(self) -> str:
        done = sum(1 for s in self.steps if s.phase == StepPhase.COMPLETED)
        return f"{done}/{len(self.steps)}"

    @classmethod
    def from_status(cls, status: api.SwapPlanStatus, message: str | None = None) -> PlanState:
        return cls(
            phase=status.phase or PlanPhase.PENDING,
            steps=tuple(status.steps),
            started_at=status.started_at,
            completed_at=status.completed_at,
            message=message,
        )


@dataclass(frozen=True)
class Target:
    source: str
    revision: str | None = None


@dataclass(frozen=True)
class NodeSlot:
    """The plan's slot on one node as the agent reports it (None fields: no such slot)."""

    reachable: bool
    source: str | None = None
    revision: str | None = None
    ready: bool = False
    active_swap: str | None = None
    swaps: tuple[contract.SwapRecord, ...] = ()  # newest first
    failed: str | None = None  # the slot's last error while its phase is Failed


@dataclass(frozen=True)
class PutTarget:
    """Ask the node's agent for the target model in the plan's slot (starts or continues a swap)."""

    node: str


@dataclass(frozen=True)
class PutPrevious:
    """After a failed swap: make the agent's desired state the old model again (no retry loop)."""

    node: str
    source: str
    revision: str | None


Action = PutTarget | PutPrevious


@dataclass(frozen=True)
class Advance:
    state: PlanState
    actions: tuple[Action, ...]


def _record_for(step: Step, slot: NodeSlot, target: Target) -> contract.SwapRecord | None:
    if step.started_at is None:
        return None
    for record in slot.swaps:
        if (record.to_source, record.to_revision) != (target.source, target.revision):
            continue
        if record.started_at >= step.started_at - CLOCK_SKEW:
            return record
    return None


def _step_phase(record: contract.SwapRecord) -> StepPhase:
    if record.old_drained_at is not None or record.old_stopped_at is not None:
        return StepPhase.DRAINING
    if record.switched_at is not None:
        return StepPhase.DRAINING
    if record.new_ready_at is not None:
        return StepPhase.SWITCHING
    return StepPhase.LOADING


def _with_record(step: Step, record: contract.SwapRecord) -> Step:
    before: dict[str, object] = {}
    if step.from_source is None and record.from_source is not None:  # started by an older operator
        before = {"from_source": record.from_source, "from_revision": record.from_revision}
    return step.model_copy(
        update={
            **before,
            "phase": _step_phase(record),
            "strategy": fields.from_agent_strategy(record.strategy),
            "warm_at": record.new_ready_at,
            "switched_at": record.switched_at,
            "drained_at": record.old_drained_at,
            "finished_at": record.finished_at,
            "requests_served": record.requests_served,
            "requests_failed": record.requests_failed,
            "max_queue_wait_ms": record.max_queue_wait_ms,
        }
    )


def _update(step: Step, **changes: object) -> Step:
    return step.model_copy(update=changes)


def _skipped(step: Step, why: str) -> Step:
    return _update(step, phase=StepPhase.SKIPPED, message=why)


def _unknown(node: str) -> str:
    return f"no InferenceNode named {node}"


def initial_steps(
    nodes: Sequence[str],
    replicas: Sequence[str] | None = None,
    known: Collection[str] | None = None,
) -> tuple[Step, ...]:
    """One step per node. With `replicas` (the nodes carrying the deployment's replicas, in
    order): a listed node without a replica gets a move step, paired with the first replica on
    a node that is not listed (none left: the step is skipped). With `known` (the InferenceNodes
    that exist): a step for any other node is skipped, and takes no replica."""
    listed = list(dict.fromkeys(nodes))
    steps = []
    spare = [n for n in dict.fromkeys(replicas or ()) if n not in listed]
    for node in listed:
        step = Step(node=node, phase=StepPhase.PENDING)
        if known is not None and node not in known:
            step = _skipped(step, _unknown(node))
        elif replicas is not None and node not in replicas:
            if spare:
                step = _update(step, replaces=spare.pop(0))
            else:
                step = _skipped(step, "no replica on a node outside spec.nodes to move here")
        steps.append(step)
    return tuple(steps)


def conflicts(nodes: Sequence[str], replicas: Sequence[str], allowed: Sequence[str]) -> str | None:
    """A move the deployment's explicit spec.placement.nodes forbids: the spec wins."""
    out = [n for n in nodes if n not in replicas and n not in allowed]
    if not out:
        return None
    return (
        f"spec.nodes names {', '.join(out)}, which the deployment's spec.placement.nodes "
        f"({', '.join(allowed)}) does not list: change spec.placement.nodes to move replicas"
    )


def _running_move(
    step: Step, slot: NodeSlot | None, target: Target, now: datetime
) -> tuple[Step, bool, tuple[Action, ...]]:
    """Follow a move step: the new replica on step.node loads the target from scratch (no swap
    record). Returns the new step, whether it failed, and the actions."""
    if slot is None or not slot.reachable:
        return _update(step, message=f"waiting for node {step.node} to answer"), False, ()
    if (slot.source, slot.revision) == (target.source, target.revision) and slot.ready:
        done = _update(
            step, phase=StepPhase.COMPLETED, finished_at=now, message=f"moved from {step.replaces}"
        )
        return done, False, ()
    if slot.failed is not None and slot.source == target.source:
        why = f"new replica failed: {slot.failed}"
        return _update(step, phase=StepPhase.ROLLED_BACK, finished_at=now, message=why), True, ()
    resend: tuple[Action, ...] = (PutTarget(step.node),) if slot.source is None else ()
    return _update(step, message=f"new replica loading (replacing {step.replaces})"), False, resend


def _running(
    state: PlanState, step: Step, slot: NodeSlot | None, target: Target, now: datetime
) -> tuple[Step, PlanState | None, tuple[Action, ...]]:
    """Follow the running step. Returns the new step, the plan state once the step failed (to be
    rolled back), and the actions."""
    if slot is None or not slot.reachable:
        return _update(step, message=f"waiting for node {step.node} to answer"), None, ()
    record = _record_for(step, slot, target)
    if record is not None:
        step = _with_record(step, record)
        if record.outcome == contract.SwapOutcome.COMPLETED:
            return (
                _update(
                    step,
                    phase=StepPhase.COMPLETED,
                    finished_at=record.finished_at or now,
                    message=None,
                ),
                None,
                (),
            )
        if record.outcome is not None:
            why = record.reason or record.outcome.value
            step = _update(
                step,
                phase=StepPhase.ROLLED_BACK,
                finished_at=record.finished_at or now,
                message=why,
            )
            failing = replace(state, phase=PlanPhase.ROLLING_BACK, message=_cause(step))
            back: tuple[Action, ...] = ()
            if record.from_source is not None:
                back = (PutPrevious(step.node, record.from_source, record.from_revision),)
            return step, failing, back
        return _update(step, message="swapping"), None, ()
    # No record yet: (re)send the desired slot; the agent's API is declarative, so this is harmless.
    return _update(step, message="swap requested"), None, (PutTarget(step.node),)


def started(state: PlanState) -> bool:
    return any(s.started_at is not None for s in state.steps)


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
    state: PlanState,
    *,
    target: Target,
    nodes: Sequence[str],
    paused: bool,
    slots: Mapping[str, NodeSlot],
    now: datetime,
    replicas: Sequence[str] | None = None,
    allowed: Sequence[str] | None = None,
    known: Collection[str] | None = None,
) -> Advance:
    """One step of the plan: fold observations into the state and say what to send to agents.

    `replicas`: the nodes carrying the deployment's replicas, when listed nodes without one
    should get one moved there (a person's plan with spec.nodes); `allowed`: the deployment's
    explicit spec.placement.nodes, which such a move must respect; `known`: the InferenceNodes
    that exist (a step for another node is skipped)."""
    if state.phase in TERMINAL:
        return Advance(state, ())
    if state.phase == PlanPhase.ROLLING_BACK:
        return _roll_back(state, slots=slots, now=now)  # a rollback runs even when paused
    if not state.steps:
        if not nodes:
            return Advance(
                replace(
                    state, phase=PlanPhase.FAILED, completed_at=now, message="no nodes to swap"
                ),
                (),
            )
        clash = conflicts(nodes, replicas, allowed) if replicas is not None and allowed else None
        if clash is not None:
            failed = replace(
                state,
                phase=PlanPhase.FAILED,
                completed_at=now,
                message=clash,
                reason=cond.Reason.PLACEMENT_CONFLICT,
            )
            return Advance(failed, ())
        state = replace(state, steps=initial_steps(nodes, replicas, known))
    steps = list(state.steps)
    actions: tuple[Action, ...] = ()
    for i, step in enumerate(steps):
        if step.phase not in RUNNING:
            continue
        if step.replaces is not None:
            new_step, broke, actions = _running_move(step, slots.get(step.node), target, now)
            failing = replace(state, phase=PlanPhase.ROLLING_BACK) if broke else None
        else:
            new_step, failing, actions = _running(state, step, slots.get(step.node), target, now)
        steps[i] = new_step
        if failing is not None:
            rolled = _roll_back(replace(failing, steps=tuple(steps)), slots=slots, now=now)
            return Advance(rolled.state, actions + rolled.actions)
        if new_step.phase in RUNNING:
            phase = PlanPhase.PAUSED if paused else PlanPhase.PROGRESSING
            return Advance(replace(state, phase=phase, steps=tuple(steps)), actions)
    state = replace(state, steps=tuple(steps))
    pending = [i for i, s in enumerate(steps) if s.phase == StepPhase.PENDING]
    if paused and (pending or not started(state)):  # nothing runs before approval
        return Advance(replace(state, phase=PlanPhase.PAUSED, message=_paused(state)), ())
    if not pending:
        return Advance(_finished(state, now), ())
    i = pending[0]
    step = steps[i]
    if known is not None and step.node not in known:  # deleted since the plan was made
        steps[i] = _skipped(step, _unknown(step.node))
        return _again(state, steps, target, nodes, paused, slots, now, known)
    slot = slots.get(step.node)
    if slot is None or not slot.reachable:
        msg = f"waiting for node {step.node} to answer"
        return Advance(
            replace(
                state, phase=PlanPhase.PROGRESSING, started_at=state.started_at or now, message=msg
            ),
            (),
        )
    if step.replaces is not None:  # a new replica here, in place of the one on step.replaces
        old = slots.get(step.replaces)
        steps[i] = _update(
            step,
            phase=StepPhase.LOADING,
            started_at=now,
            message=f"new replica requested (replacing {step.replaces})",
            from_source=old.source if old is not None else None,
            from_revision=old.revision if old is not None else None,
        )
    else:
        on_target = (slot.source, slot.revision) == (target.source, target.revision)
        if slot.source is None:  # nothing to do here: skip it and take the next
            steps[i] = _skipped(step, "no replica on this node")
            return _again(state, steps, target, nodes, paused, slots, now, known)
        if on_target and slot.ready and slot.active_swap is None:  # its goal already holds
            steps[i] = _update(step, phase=StepPhase.COMPLETED, finished_at=now, message=ON_TARGET)
            return _again(state, steps, target, nodes, paused, slots, now, known)
        steps[i] = _update(
            step,
            phase=StepPhase.LOADING,
            started_at=now,
            message="swap requested",
            from_source=slot.source,
            from_revision=slot.revision,
        )
    return Advance(
        replace(
            state,
            phase=PlanPhase.PROGRESSING,
            steps=tuple(steps),
            started_at=state.started_at or now,
            message=None,
        ),
        (PutTarget(step.node),),
    )


def _again(
    state: PlanState,
    steps: list[Step],
    target: Target,
    nodes: Sequence[str],
    paused: bool,
    slots: Mapping[str, NodeSlot],
    now: datetime,
    known: Collection[str] | None,
) -> Advance:
    """Advance again after a step finished without running (skipped, or already on target)."""
    return advance(
        replace(state, steps=tuple(steps)),
        target=target,
        nodes=nodes,
        paused=paused,
        slots=slots,
        now=now,
        known=known,
    )


def _skips(state: PlanState) -> str:
    return "; ".join(f"{s.node}: {s.message}" for s in state.steps if s.phase == StepPhase.SKIPPED)


def _paused(state: PlanState) -> str:
    skipped = _skips(state)
    return "paused: set spec.paused=false to run" + (f" (skipped: {skipped})" if skipped else "")


def _finished(state: PlanState, now: datetime) -> PlanState:
    """No step left: Completed when a step reached the target, else nothing was done (every
    step skipped) and the plan says so."""
    if any(s.phase == StepPhase.COMPLETED for s in state.steps):
        return replace(state, phase=PlanPhase.COMPLETED, completed_at=now, message=None)
    return replace(
        state,
        phase=PlanPhase.FAILED,
        completed_at=now,
        message=f"no step had anything to do: {_skips(state)}",
        reason=cond.Reason.NOTHING_TO_DO,
    )


# ------------------------------------------------------------------------------- rollback


def _cause(failed: Step) -> str:
    return f"step on {failed.node} failed and was rolled back: {failed.message or failed.phase}"


def changed(step: Step) -> bool:
    """A completed step that changed its node's model (one already on target never started)."""
    return step.phase == StepPhase.COMPLETED and step.started_at is not None


def revertible(step: Step) -> bool:
    """A completed step that changed its node's model, and knows what the node served before."""
    return changed(step) and step.from_source is not None


def _previous(step: Step) -> Model:
    return (step.from_source or "", step.from_revision)


def _put_previous(step: Step) -> PutPrevious:
    return PutPrevious(step.replaces or step.node, step.from_source or "", step.from_revision)


def _revert_record(step: Step, slot: NodeSlot) -> contract.SwapRecord | None:
    begun = step.revert.started_at if step.revert is not None else None
    if begun is None:
        return None
    for record in slot.swaps:
        if (record.to_source, record.to_revision) != _previous(step):
            continue
        if record.started_at >= begun - CLOCK_SKEW:
            return record
    return None


def _with_revert(step: Step, record: contract.SwapRecord) -> Step:
    revert = api.StepRevert(
        started_at=step.revert.started_at if step.revert is not None else record.started_at,
        finished_at=record.finished_at,
        requests_served=record.requests_served,
        requests_failed=record.requests_failed,
    )
    return _update(step, revert=revert)


def _roll_back(state: PlanState, *, slots: Mapping[str, NodeSlot], now: datetime) -> Advance:
    """Revert the completed steps one node at a time (last completed first), then end the plan
    `RolledBack` with the failed step's reason; a failed revert ends it `Failed`."""
    steps = list(state.steps)
    failed = next((s for s in steps if s.phase == StepPhase.ROLLED_BACK), None)
    cause = _cause(failed) if failed is not None else (state.message or "a step failed")
    rolling = replace(state, phase=PlanPhase.ROLLING_BACK)
    for i, step in enumerate(steps):
        if step.phase != StepPhase.REVERTING:
            continue
        slot = slots.get(step.replaces or step.node)
        doing = f"{cause}; reverting {step.node}"
        if slot is None or not slot.reachable:
            return Advance(replace(rolling, message=f"{doing}: waiting for the node to answer"), ())
        if step.replaces is not None:  # a move goes back: the replica returns to step.replaces
            if (slot.source, slot.revision) == _previous(step) and slot.ready:
                steps[i] = _update(
                    step, phase=StepPhase.REVERTED, message=f"moved back to {step.replaces}"
                )
                continue
            if slot.failed is not None and slot.source == step.from_source:
                why = f"replica on {step.replaces} failed: {slot.failed}"
                steps[i] = _update(step, phase=StepPhase.FAILED, message=f"revert failed: {why}")
                return Advance(
                    replace(
                        state,
                        phase=PlanPhase.FAILED,
                        steps=tuple(steps),
                        completed_at=now,
                        message=f"{cause}; reverting {step.node} failed: {why}",
                    ),
                    (),
                )
            resend = (_put_previous(step),) if slot.source is None else ()
            return Advance(replace(rolling, steps=tuple(steps), message=doing), resend)
        record = _revert_record(step, slot)
        if record is None:  # not started on the agent yet (or lost in a restart): (re)send it
            return Advance(replace(rolling, message=doing), (_put_previous(step),))
        step = _with_revert(step, record)
        if record.outcome is None:
            steps[i] = step
            return Advance(replace(rolling, steps=tuple(steps), message=doing), ())
        if record.outcome != contract.SwapOutcome.COMPLETED:
            why = record.reason or record.outcome.value
            steps[i] = _update(step, phase=StepPhase.FAILED, message=f"revert failed: {why}")
            back: tuple[Action, ...] = ()
            if record.from_source is not None:  # keep the agent on what it still serves
                back = (PutPrevious(step.node, record.from_source, record.from_revision),)
            return Advance(
                replace(
                    state,
                    phase=PlanPhase.FAILED,
                    steps=tuple(steps),
                    completed_at=now,
                    message=f"{cause}; reverting {step.node} failed: {why}",
                ),
                back,
            )
        steps[i] = _update(
            step, phase=StepPhase.REVERTED, message=f"reverted to {step.from_source}"
        )
    todo = [i for i in reversed(range(len(steps))) if revertible(steps[i])]
    if not todo:
        reverted = [s.node for s in steps if s.phase == StepPhase.REVERTED]
        message = cause + (f"; reverted {', '.join(reverted)}" if reverted else "")
        return Advance(
            replace(
                state,
                phase=PlanPhase.ROLLED_BACK,
                steps=tuple(steps),
                completed_at=now,
                message=message,
            ),
            (),
        )
    i = todo[0]
    step = steps[i]
    if step.replaces is not None:
        undo = f"moving back to {step.replaces}"
    else:
        slot = slots.get(step.node)
        if slot is None or not slot.reachable:
            message = f"{cause}; reverting {step.node}: waiting for the node to answer"
            return Advance(replace(rolling, steps=tuple(steps), message=message), ())
        on_previous = (slot.source, slot.revision) == _previous(step)
        if slot.source is None or (on_previous and slot.ready and slot.active_swap is None):
            why = (
                "no replica on this node"
                if slot.source is None
                else "already on the previous model"
            )
            steps[i] = _update(step, phase=StepPhase.REVERTED, message=SKIPPED + why)
            return _roll_back(replace(rolling, steps=tuple(steps)), slots=slots, now=now)
        undo = f"reverting to {step.from_source}"
    steps[i] = _update(
        step, phase=StepPhase.REVERTING, revert=api.StepRevert(started_at=now), message=undo
    )
    return Advance(
        replace(rolling, steps=tuple(steps), message=f"{cause}; reverting {step.node}"),
        (_put_previous(steps[i]),),
    )


def serving(steps: Sequence[Step], target: Model) -> dict[str, Model]:
    """What each node that a plan's step changed (or tried to change) is left serving: the
    target after a completed step (or a revert that failed), the previous model once reverted."""
    out: dict[str, Model] = {}
    for step in steps:
        if step.replaces is not None:
            if step.phase in RUNNING or step.phase in (StepPhase.COMPLETED, StepPhase.FAILED):
                out[step.node] = target
            elif step.phase in (StepPhase.REVERTING, StepPhase.REVERTED) and step.from_source:
                out[step.replaces] = _previous(step)
            continue
        revert_failed = step.phase == StepPhase.FAILED and step.revert is not None
        if changed(step) or revert_failed:
            out[step.node] = target
        elif step.phase in (StepPhase.REVERTING, StepPhase.REVERTED) and step.from_source:
            out[step.node] = _previous(step)
    return out


def moves(steps: Sequence[Step]) -> dict[str, str]:
    """Replicas a plan's move steps relocate (from node -> to node): while a move runs or after
    it completed, its replica belongs on the step's node; once reverted, back where it was."""
    out: dict[str, str] = {}
    for step in steps:
        if step.replaces is None:
            continue
        if step.phase in RUNNING or step.phase in (StepPhase.COMPLETED, StepPhase.FAILED):
            out[step.replaces] = step.node
        elif step.phase in (StepPhase.REVERTING, StepPhase.REVERTED):
            out[step.node] = step.replaces
    return out


def moving_to(steps: Sequence[Step]) -> frozenset[str]:
    """Nodes where a running move (or its revert) brings up a replica: never delete that slot."""
    out = {s.node for s in steps if s.replaces is not None and s.phase in RUNNING}
    out |= {s.replaces for s in steps if s.replaces is not None and s.phase == StepPhase.REVERTING}
    return frozenset(out)

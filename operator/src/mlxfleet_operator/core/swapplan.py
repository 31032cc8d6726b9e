"""SwapPlan progress as a pure state machine, fed by what the agents report.

May import: the standard library and the agent `contract` (swap records). Called by: the SwapPlan
handler, which stores the returned `PlanState` in the plan's status and performs the returned
actions (an idempotent `PUT /v1/slots/{name}`). Because every decision is recomputed from the
status plus fresh observations, an operator killed mid-plan resumes without repeating a step:
finished steps are never re-run, and re-sending the running step's desired slot is harmless.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from mlxfleet_agent import contract

# A record belongs to a step when it started after the step did (agent and operator clocks may
# differ a little; plans for the same target are minutes apart in practice).
CLOCK_SKEW = timedelta(seconds=120)


class PlanPhase(StrEnum):
    PENDING = "Pending"
    PAUSED = "Paused"
    PROGRESSING = "Progressing"
    COMPLETED = "Completed"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"


TERMINAL = frozenset({PlanPhase.COMPLETED, PlanPhase.FAILED, PlanPhase.ROLLED_BACK})


class StepPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETED = "Completed"
    SKIPPED = "Skipped"
    ROLLED_BACK = "RolledBack"


DONE_STEPS = frozenset({StepPhase.COMPLETED, StepPhase.SKIPPED})


@dataclass(frozen=True)
class Step:
    node: str
    phase: StepPhase = StepPhase.PENDING
    strategy: str | None = None
    started_at: datetime | None = None
    warm_at: datetime | None = None
    switched_at: datetime | None = None
    drained_at: datetime | None = None
    finished_at: datetime | None = None
    requests_served: int = 0
    requests_failed: int = 0
    max_queue_wait_ms: float = 0.0
    message: str | None = None


@dataclass(frozen=True)
class PlanState:
    phase: PlanPhase = PlanPhase.PENDING
    steps: tuple[Step, ...] = ()
    started_at: datetime | None = None
    completed_at: datetime | None = None
    message: str | None = None

    @property
    def progress(self) -> str:
        done = sum(1 for s in self.steps if s.phase in DONE_STEPS)
        return f"{done}/{len(self.steps)}"


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


def _with_record(step: Step, record: contract.SwapRecord) -> Step:
    return replace(
        step,
        strategy=str(record.strategy.value),
        warm_at=record.new_ready_at,
        switched_at=record.switched_at,
        drained_at=record.old_drained_at,
        finished_at=record.finished_at,
        requests_served=record.requests_served,
        requests_failed=record.requests_failed,
        max_queue_wait_ms=record.max_queue_wait_ms,
    )


def initial_steps(nodes: Sequence[str]) -> tuple[Step, ...]:
    return tuple(Step(node=n) for n in dict.fromkeys(nodes))


def _running(
    state: PlanState, step: Step, slot: NodeSlot | None, target: Target, now: datetime
) -> tuple[Step, PlanState | None, tuple[Action, ...]]:
    """Follow the running step. Returns the new step, a terminal plan state if any, actions."""
    if slot is None or not slot.reachable:
        return replace(step, message=f"waiting for node {step.node} to answer"), None, ()
    record = _record_for(step, slot, target)
    if record is not None:
        step = _with_record(step, record)
        if record.outcome == contract.SwapOutcome.COMPLETED:
            return (
                replace(
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
            step = replace(
                step,
                phase=StepPhase.ROLLED_BACK,
                finished_at=record.finished_at or now,
                message=why,
            )
            rolled = replace(
                state,
                phase=PlanPhase.ROLLED_BACK,
                completed_at=now,
                message=f"step on {step.node} failed and was rolled back: {why}",
            )
            back: tuple[Action, ...] = ()
            if record.from_source is not None:
                back = (PutPrevious(step.node, record.from_source, record.from_revision),)
            return step, rolled, back
        return replace(step, message="swapping"), None, ()
    # No record yet: (re)send the desired slot; the agent's API is declarative, so this is harmless.
    return replace(step, message="swap requested"), None, (PutTarget(step.node),)


def advance(
    state: PlanState,
    *,
    target: Target,
    nodes: Sequence[str],
    paused: bool,
    slots: Mapping[str, NodeSlot],
    now: datetime,
) -> Advance:
    """One step of the plan: fold observations into the state and say what to send to agents."""
    if state.phase in TERMINAL:
        return Advance(state, ())
    if not state.steps:
        if not nodes:
            return Advance(
                replace(
                    state, phase=PlanPhase.FAILED, completed_at=now, message="no nodes to swap"
                ),
                (),
            )
        state = replace(state, steps=initial_steps(nodes))
    steps = list(state.steps)
    actions: tuple[Action, ...] = ()
    for i, step in enumerate(steps):
        if step.phase != StepPhase.RUNNING:
            continue
        new_step, terminal, actions = _running(state, step, slots.get(step.node), target, now)
        steps[i] = new_step
        if terminal is not None:
            return Advance(replace(terminal, steps=tuple(steps)), actions)
        if new_step.phase == StepPhase.RUNNING:
            phase = PlanPhase.PAUSED if paused else PlanPhase.PROGRESSING
            return Advance(replace(state, phase=phase, steps=tuple(steps)), actions)
    state = replace(state, steps=tuple(steps))
    pending = [i for i, s in enumerate(steps) if s.phase == StepPhase.PENDING]
    if not pending:
        return Advance(
            replace(state, phase=PlanPhase.COMPLETED, completed_at=now, message=None), ()
        )
    if paused:
        return Advance(
            replace(state, phase=PlanPhase.PAUSED, message="paused: set spec.paused=false to run"),
            (),
        )
    i = pending[0]
    step = steps[i]
    slot = slots.get(step.node)
    if slot is None or not slot.reachable:
        msg = f"waiting for node {step.node} to answer"
        return Advance(
            replace(
                state, phase=PlanPhase.PROGRESSING, started_at=state.started_at or now, message=msg
            ),
            (),
        )
    if slot.source is None:
        steps[i] = replace(
            step, phase=StepPhase.SKIPPED, finished_at=now, message="no replica on this node"
        )
        return advance(
            replace(state, steps=tuple(steps)),
            target=target,
            nodes=nodes,
            paused=paused,
            slots=slots,
            now=now,
        )
    if (
        (slot.source, slot.revision) == (target.source, target.revision)
        and slot.ready
        and slot.active_swap is None
    ):
        steps[i] = replace(
            step, phase=StepPhase.SKIPPED, finished_at=now, message="already on target"
        )
        return advance(
            replace(state, steps=tuple(steps)),
            target=target,
            nodes=nodes,
            paused=paused,
            slots=slots,
            now=now,
        )
    steps[i] = replace(step, phase=StepPhase.RUNNING, started_at=now, message="swap requested")
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

"""The state a SwapPlan's decisions fold: the plan's own progress, what each node reports, and
the actions (agent requests) a decision asks for.

May import: the standard library, `api` and the agent `contract`. Called by: the other
`core.swapplan` modules and the SwapPlan handler (which stores `PlanState` in the plan's status
and performs the actions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef

# An agent too old to echo a step's requestId (or a step started by an operator too old to send
# one): its record belongs to the step when it started after the step did, on the operator's
# clock (less this tolerance; plans for the same target are minutes apart in practice).
CLOCK_SKEW = timedelta(seconds=120)

RUNNING = frozenset(
    {
        swp.StepPhase.LOADING,
        swp.StepPhase.WARMING,
        swp.StepPhase.SWITCHING,
        swp.StepPhase.DRAINING,
    }
)
SKIPPED = "skipped: "  # message prefix of a revert that had nothing to do (Reverted)
ON_TARGET = "already on target"  # a Completed step that had nothing to change


@dataclass(frozen=True)
class PlanState:
    """The operator-owned part of SwapPlan status (conditions are derived from it)."""

    phase: swp.SwapPhase = swp.SwapPhase.PENDING
    steps: tuple[swp.SwapStep, ...] = ()
    started_at: datetime | None = None
    completed_at: datetime | None = None
    message: str | None = None
    reason: cond.Reason | None = None  # why it ended, when the phase alone does not say
    plan_id: str = (
        "plan"  # the plan's uid: the stem of its steps' request ids (identity, no status)
    )

    @property
    def progress(self) -> str:
        done = sum(1 for s in self.steps if s.phase == swp.StepPhase.COMPLETED)
        return f"{done}/{len(self.steps)}"

    @property
    def started(self) -> bool:
        """A step ran (a plan refused or waiting up front changed nothing)."""
        return any(s.started_at is not None for s in self.steps)

    @property
    def open(self) -> bool:
        """Neither finished nor started: the plan may still wait, or be refused, without harm."""
        return not self.phase.terminal and not self.started

    @classmethod
    def of(cls, plan: swp.SwapPlan) -> PlanState:
        """The state the plan's status records. A finished plan keeps saying why it ended (its
        Ready condition's message: status has no message field of its own)."""
        status = plan.status
        phase = status.phase or swp.SwapPhase.PENDING
        ready = cond.find(status.conditions, cond.ConditionType.READY)
        return cls(
            phase=phase,
            steps=tuple(status.steps),
            started_at=status.started_at,
            completed_at=status.completed_at,
            message=ready.message if ready is not None and phase.terminal else None,
            plan_id=plan.metadata.uid or plan.metadata.name or "plan",
        )


@dataclass(frozen=True)
class NodeSlot:
    """The plan's slot on one node as the agent reports it (`model` None: no such slot)."""

    reachable: bool
    model: ModelRef | None = None
    ready: bool = False
    active_swap: str | None = None
    swaps: tuple[contract.SwapRecord, ...] = ()  # newest first
    failed: str | None = None  # the slot's last error while its phase is Failed
    # The agent's clock minus the operator's at this observation (None: an agent too old to
    # report its clock, nor to echo request ids).
    offset: timedelta | None = None

    @classmethod
    def observed(
        cls,
        slot: contract.SlotStatus | None,
        swaps: Sequence[contract.SwapRecord],
        offset: timedelta | None = None,
    ) -> NodeSlot:
        """What an agent that answered says about the slot (None: it runs no such slot)."""
        if slot is None:
            return cls(reachable=True, swaps=tuple(swaps), offset=offset)
        failed = slot.phase == contract.SlotPhase.FAILED
        return cls(
            reachable=True,
            model=ModelRef.of(slot),
            ready=slot.ready,
            active_swap=slot.active_swap,
            swaps=tuple(swaps),
            failed=(slot.last_error or "backend failed") if failed else None,
            offset=offset,
        )

    def serves(self, model: ModelRef) -> bool:
        """Ready on `model`, with no swap in flight: a step towards `model` has nothing to do."""
        return self.model == model and self.ready and self.active_swap is None


@dataclass(frozen=True)
class PutTarget:
    """Ask the node's agent for the target model in the plan's slot (starts or continues a swap);
    `request_id`: the step's id, which the agent's record of the swap echoes."""

    node: str
    request_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PutPrevious:
    """After a failed swap: make the agent's desired state the old model again (no retry loop)."""

    node: str
    model: ModelRef
    request_id: str | None = field(default=None, compare=False)  # a revert's (None: no record)


@dataclass(frozen=True)
class PutGroup:
    """Ask every rank's agent of sharded group `group` for its rank of the new formation (the
    step's decision, `groups.Decision`); `request_id`: the step's id, echoed by each record."""

    group: int
    request_id: str | None = field(default=None, compare=False)


Action = PutTarget | PutPrevious | PutGroup


@dataclass(frozen=True)
class Advance:
    state: PlanState
    actions: tuple[Action, ...]


def update(step: swp.SwapStep, **changes: object) -> swp.SwapStep:
    return step.model_copy(update=changes)


def skipped(step: swp.SwapStep, why: str) -> swp.SwapStep:
    return update(step, phase=swp.StepPhase.SKIPPED, message=why)


def unknown(node: str) -> str:
    return f"no InferenceNode named {node}"


def waiting_for_node(node: str) -> str:
    return f"waiting for node {node} to answer"

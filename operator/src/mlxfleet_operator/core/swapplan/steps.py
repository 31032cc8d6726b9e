"""A SwapPlan's steps: the steps a plan starts with, and how an agent's swap record fills one.

A step's swap is the agent's swap record that echoes the step's request id (from the plan's uid
and the step's index, kept in the step: a restarted or new leader asks with the same id); the
record's times are the agent's clock and are put on the operator's (`clocks`) when copied.
May import: the standard library, `api`, the agent `contract`, `clocks`, `state`. Called by:
`progress`, `rollback` and `gate`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import fields
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import clocks
from mlxfleet_operator.core.swapplan import state as st


def initial_steps(
    nodes: Sequence[str],
    replicas: Sequence[str] | None = None,
    known: Collection[str] | None = None,
) -> tuple[swp.SwapStep, ...]:
    """One step per node. With `replicas` (the nodes carrying the deployment's replicas, in
    order): a listed node without a replica gets a move step, paired with the first replica on
    a node that is not listed (none left: the step is skipped). With `known` (the InferenceNodes
    that exist): a step for any other node is skipped, and takes no replica."""
    listed = list(dict.fromkeys(nodes))
    steps = []
    spare = [n for n in dict.fromkeys(replicas or ()) if n not in listed]
    for node in listed:
        step = swp.SwapStep(node=node, phase=swp.StepPhase.PENDING)
        if known is not None and node not in known:
            step = st.skipped(step, st.unknown(node))
        elif replicas is not None and node not in replicas:
            if spare:
                step = st.update(step, replaces=spare.pop(0))
            else:
                step = st.skipped(step, "no replica on a node outside spec.nodes to move here")
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


def previous(step: swp.SwapStep) -> ModelRef | None:
    """What the step's node (or, for a move, `replaces`) served before the step."""
    if step.from_source is None:
        return None
    return ModelRef(step.from_source, step.from_revision)


def changed(step: swp.SwapStep) -> bool:
    """A completed step that changed its node's model (one already on target never started)."""
    return step.phase == swp.StepPhase.COMPLETED and step.started_at is not None


def revertible(step: swp.SwapStep) -> bool:
    """A completed step that changed its node's model, and knows what the node served before
    (a sharded group's step is not reverted: docs/sharding.md, Limits)."""
    return changed(step) and step.from_source is not None and step.group is None


def request_id(plan_id: str, index: int, *, revert: bool = False) -> str:
    """The id of step `index`'s swap (or of its revert): unique per plan and step, and the same
    however often the step's request is sent, by whichever operator."""
    return f"{plan_id}.{index}" + (".revert" if revert else "")


def record_to(
    slot: st.NodeSlot, model: ModelRef, request: str | None, since: datetime | None
) -> contract.SwapRecord | None:
    """The agent's swap to `model` that the step (started at `since`, operator clock) asked for
    with `request`: the record that echoes that id. An agent too old to echo ids (it reports no
    clock either), or a step started by an operator too old to send one: the newest record that
    started after `since`, on the operator's clock, less `state.CLOCK_SKEW`."""
    if since is None:
        return None
    by_id = request is not None and slot.offset is not None
    for record in slot.swaps:
        if ModelRef(record.to_source, record.to_revision) != model:
            continue
        if by_id:
            if record.request_id == request:
                return record
        elif clocks.to_operator(record.started_at, slot.offset) >= since - st.CLOCK_SKEW:
            return record
    return None


def origin(record: contract.SwapRecord) -> ModelRef | None:
    """What the node served before the recorded swap (None: an agent too old to say)."""
    if record.from_source is None:
        return None
    return ModelRef(record.from_source, record.from_revision)


def _phase(record: contract.SwapRecord) -> swp.StepPhase:
    if record.old_drained_at is not None or record.old_stopped_at is not None:
        return swp.StepPhase.DRAINING
    if record.switched_at is not None:
        return swp.StepPhase.DRAINING
    if record.new_ready_at is not None:
        return swp.StepPhase.SWITCHING
    return swp.StepPhase.LOADING


def with_record(
    step: swp.SwapStep, record: contract.SwapRecord, offset: timedelta | None, now: datetime
) -> swp.SwapStep:
    """The step's timeline and counters from the agent's record of its swap, its times on the
    operator's clock (`offset`: the agent's clock minus the operator's), between the step's
    start and `now`."""

    def local(when: datetime | None) -> datetime | None:
        if when is None:
            return None
        return clocks.to_operator(when, offset, floor=step.started_at, ceiling=now)

    before: dict[str, object] = {}
    if step.from_source is None and record.from_source is not None:  # started by an older operator
        before = {"from_source": record.from_source, "from_revision": record.from_revision}
    return step.model_copy(
        update={
            **before,
            "phase": _phase(record),
            "strategy": fields.from_agent_strategy(record.strategy),
            "warm_at": local(record.new_ready_at),
            "switched_at": local(record.switched_at),
            "drained_at": local(record.old_drained_at),
            "finished_at": local(record.finished_at),
            "requests_served": record.requests_served,
            "requests_failed": record.requests_failed,
            "max_queue_wait_ms": record.max_queue_wait_ms,
        }
    )

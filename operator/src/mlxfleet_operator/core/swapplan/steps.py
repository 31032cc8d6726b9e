"""A SwapPlan's steps: the steps a plan starts with, and how an agent's swap record fills one.

May import: the standard library, `api`, the agent `contract`, `state`. Called by: `progress`,
`rollback` and `gate`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.api import fields
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
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
    """A completed step that changed its node's model, and knows what the node served before."""
    return changed(step) and step.from_source is not None


def record_to(
    slot: st.NodeSlot, model: ModelRef, since: datetime | None
) -> contract.SwapRecord | None:
    """The agent's newest swap to `model` that started after `since` (less the clock skew)."""
    if since is None:
        return None
    for record in slot.swaps:
        if ModelRef(record.to_source, record.to_revision) != model:
            continue
        if record.started_at >= since - st.CLOCK_SKEW:
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


def with_record(step: swp.SwapStep, record: contract.SwapRecord) -> swp.SwapStep:
    """The step's timeline and counters from the agent's record of its swap."""
    before: dict[str, object] = {}
    if step.from_source is None and record.from_source is not None:  # started by an older operator
        before = {"from_source": record.from_source, "from_revision": record.from_revision}
    return step.model_copy(
        update={
            **before,
            "phase": _phase(record),
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

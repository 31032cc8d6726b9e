"""What a SwapPlan's steps leave each node serving: the models they changed (or reverted), the
replicas they moved, and the nodes where a move is bringing a replica up; for a sharded
deployment, the formations its group steps made, which groups a step is swapping, and which
formations a failed step left broken; all of it as the deployment's view of a plan
(`core.deployment.plan.PlanInfo`, `plan_info`), and which plan governs a deployment (`governing`).

May import: the standard library, `api`, `core.deployment.plan` (a layer below: the deployment
says what it needs of a plan, this package fills it), `state`, `steps`. Called by: the
ModelDeployment handler (`governing`: a deployment's replicas follow the plan that governs them).
"""

from __future__ import annotations

from collections.abc import Sequence

from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import steps as plan_steps

StepPhase = swp.StepPhase
_LEFT_ON_TARGET = (StepPhase.COMPLETED, StepPhase.FAILED)
_GOING_BACK = (StepPhase.REVERTING, StepPhase.REVERTED)


def plan_info(plan: swp.SwapPlan) -> plans.PlanInfo:
    """The SwapPlan as far as its deployment cares: what its steps changed, moved and are
    bringing up, and why it failed (the failed step first, the cause, then a failed revert)."""
    target = ModelRef.of(plan.spec.target)
    failed = sorted(
        (s for s in plan.status.steps if s.phase in (StepPhase.ROLLED_BACK, StepPhase.FAILED)),
        key=lambda s: s.phase != StepPhase.ROLLED_BACK,
    )
    message = None
    if failed:
        whys = "; ".join(f"step on {s.node}: {s.message or s.phase}" for s in failed)
        message = f"SwapPlan {plan.metadata.name} {whys}"
    return plans.PlanInfo(
        name=plan.metadata.name or "",
        target=target,
        phase=plan.status.phase,
        paused=plan.spec.paused,
        serving=serving(plan.status.steps, target),
        moves=moves(plan.status.steps),
        holds=moving_to(plan.status.steps),
        message=message,
        created=ts.isoformat() if (ts := plan.metadata.creation_timestamp) else None,
        started=any(s.started_at is not None for s in plan.status.steps),
        groups=groups(plan.status.steps, target),
        swapping=swapping(plan.status.steps),
        failed_groups=failed_groups(plan.status.steps),
    )


def governing(found: Sequence[swp.SwapPlan], *, named: str | None) -> plans.PlanInfo | None:
    """The SwapPlan that governs a deployment's replicas: a running one (the one in
    status.swapPlan first, else the oldest, e.g. written by a person), else the one named in
    status (finished: its completed steps say which replicas already moved)."""
    infos = sorted(
        (plan_info(p) for p in found),
        key=lambda i: (i.name != named, i.created or "", i.name),
    )
    active = [i for i in infos if i.active]
    if active:
        return active[0]
    return next((i for i in infos if i.name == named), None)


def serving(steps: Sequence[swp.SwapStep], target: ModelRef) -> dict[str, ModelRef]:
    """What each node that a plan's step changed (or tried to change) is left serving: the
    target after a completed step (or a revert that failed), the previous model once reverted."""
    out: dict[str, ModelRef] = {}
    for step in steps:
        before = plan_steps.previous(step)
        if step.group is not None:
            continue  # a group's formation: `groups`
        if step.replaces is not None:
            if step.phase in st.RUNNING or step.phase in _LEFT_ON_TARGET:
                out[step.node] = target
            elif step.phase in _GOING_BACK and before is not None and before.source:
                out[step.replaces] = before
            continue
        revert_failed = step.phase == StepPhase.FAILED and step.revert is not None
        if plan_steps.changed(step) or revert_failed:
            out[step.node] = target
        elif step.phase in _GOING_BACK and before is not None and before.source:
            out[step.node] = before
    return out


def moves(steps: Sequence[swp.SwapStep]) -> dict[str, str]:
    """Replicas a plan's move steps relocate (from node -> to node): while a move runs or after
    it completed, its replica belongs on the step's node; once reverted, back where it was."""
    out: dict[str, str] = {}
    for step in steps:
        if step.replaces is None:
            continue
        if step.phase in st.RUNNING or step.phase in _LEFT_ON_TARGET:
            out[step.replaces] = step.node
        elif step.phase in _GOING_BACK:
            out[step.node] = step.replaces
    return out


def moving_to(steps: Sequence[swp.SwapStep]) -> frozenset[str]:
    """Nodes where a running move (or its revert) brings up a replica: never delete that slot."""
    out = {s.node for s in steps if s.replaces is not None and s.phase in st.RUNNING}
    out |= {s.replaces for s in steps if s.replaces is not None and s.phase == StepPhase.REVERTING}
    return frozenset(out)


def groups(
    steps: Sequence[swp.SwapStep], target: ModelRef
) -> dict[int, tuple[str, ModelRef, tuple[str, ...]]]:
    """The formation each group step made (its id, the target, its nodes by rank), from the
    moment it started; a step that failed (rolled back) made none that serves."""
    out: dict[int, tuple[str, ModelRef, tuple[str, ...]]] = {}
    for step in steps:
        if step.group is None or step.group_id is None or not step.ranks:
            continue
        if step.phase in st.RUNNING or step.phase in _LEFT_ON_TARGET:
            out[step.group] = (step.group_id, target, tuple(step.ranks))
    return out


def swapping(steps: Sequence[swp.SwapStep]) -> frozenset[int]:
    """Groups whose step runs: the plan writes their ranks."""
    return frozenset(s.group for s in steps if s.group is not None and s.phase in st.RUNNING)


def failed_groups(steps: Sequence[swp.SwapStep]) -> dict[int, str]:
    """Formations a failed group step left broken (rank 0 went back to the old model, the
    other ranks may not have): the deployment re-forms such a group."""
    return {
        s.group: s.group_id
        for s in steps
        if s.group is not None and s.group_id is not None and s.phase == StepPhase.ROLLED_BACK
    }

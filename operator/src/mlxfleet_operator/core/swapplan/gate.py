"""Before a SwapPlan advances: must it wait, can its deployment take it, and which nodes does it
cover. Each answer is a decision on typed inputs; the handler only gathers them.

- `blocked`: plans of one deployment run one after another (the older running one first).
- `deployment_missing` / `deployment_unusable`: the plan's ModelDeployment is gone, refused by
  the operator's model, or its agent slot name belongs to another deployment.
- `scope`: the nodes the plan's steps run on, where a replica may be moved, which nodes to
  ask for fresh observations, and which nodes copy the target ahead of need (a sharded
  deployment: every rank's node of every group).

May import: the standard library, `api`, `state`, `progress`. Called by: the SwapPlan handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core.swapplan import progress
from mlxfleet_operator.core.swapplan import state as st


def blocked(
    plan: swp.SwapPlan, previous: st.PlanState, others: Sequence[swp.SwapPlan]
) -> st.PlanState | None:
    """`Pending`, naming the older plan of the same deployment that is still running, when
    this plan has not started yet (None: it may go on)."""
    if not previous.open:
        return None
    running = [
        (o.metadata.name or "", o.metadata.creation_timestamp, not _finished(o)) for o in others
    ]
    name, created = plan.metadata.name or "", plan.metadata.creation_timestamp
    blocker = progress.waiting_for(name, created, running)
    if blocker is None:
        return None
    return st.PlanState(
        phase=swp.SwapPhase.PENDING, message=f"waiting for SwapPlan {blocker} to finish"
    )


def _finished(plan: swp.SwapPlan) -> bool:
    return plan.status.phase is not None and plan.status.phase.terminal


def deployment_missing(previous: st.PlanState, name: str, *, now: datetime) -> st.PlanState:
    """The plan's ModelDeployment does not exist: a plan not finished yet fails
    (`DeploymentNotFound`); a finished one keeps how it ended."""
    if previous.phase.terminal:
        return previous
    return st.PlanState(
        phase=swp.SwapPhase.FAILED,
        steps=previous.steps,
        completed_at=now,
        message=f"ModelDeployment {name} not found",
        reason=cond.Reason.DEPLOYMENT_NOT_FOUND,
    )


def deployment_unusable(previous: st.PlanState, why: str) -> st.PlanState | None:
    """The deployment exists but may not be changed now (the operator's model refuses it, or
    its slot name is another deployment's): a plan that has not started waits, saying why; one
    that started or finished is left exactly as it is (None: write nothing)."""
    if not previous.open:
        return None
    return st.PlanState(phase=swp.SwapPhase.PENDING, message=why)


@dataclass(frozen=True)
class Scope:
    """What the plan covers, from its spec, its steps so far and the deployment's replicas."""

    nodes: tuple[str, ...]  # the steps' nodes, in order
    replicas: tuple[str, ...] | None  # set: listed nodes without a replica get one moved there
    allowed: tuple[str, ...] | None  # the deployment's explicit spec.placement.nodes
    watched: tuple[str, ...]  # nodes whose agents are asked for fresh observations
    prefetch: tuple[str, ...] = ()  # nodes that copy the target now (the steps' and ranks')


def scope(plan: swp.SwapPlan, md: mdep.ModelDeployment, previous: st.PlanState) -> Scope:
    """Unset spec.nodes: the deployment's replicas in name order (sharded: each group's rank 0,
    by group). A person's plan may name nodes without a replica: those get one moved there (not
    for groups). A finished plan watches nothing."""
    carrying = tuple(
        p.node for p in md.status.placements if p.phase != mdep.PlacementPhase.REMOVING
    )
    nodes = tuple(plan.spec.nodes or sorted(carrying))
    if md.spec.sharding is not None:
        leaders = [
            min(g.ranks, key=lambda r: r.rank).node
            for g in sorted(md.status.groups, key=lambda g: g.index)
            if g.ranks
        ]
        ranks = [r.node for g in md.status.groups for r in g.ranks]
        ranks += [n for s in previous.steps for n in s.ranks or ()]
        nodes = tuple(plan.spec.nodes or leaders)
        return Scope(
            nodes=nodes,
            replicas=None,
            allowed=None,
            watched=() if previous.phase.terminal else tuple(dict.fromkeys([*nodes, *leaders])),
            prefetch=tuple(dict.fromkeys([*nodes, *ranks])),
        )
    allowed = md.spec.placement.nodes
    watched: tuple[str, ...] = ()
    if not previous.phase.terminal:
        moved = [s.replaces for s in previous.steps if s.replaces]
        ran = [s.node for s in previous.steps]
        watched = tuple(dict.fromkeys([*nodes, *carrying, *ran, *moved]))
    return Scope(
        nodes=nodes,
        replicas=carrying if plan.spec.nodes else None,
        allowed=tuple(allowed) if allowed is not None else None,
        watched=watched,
        prefetch=nodes,
    )

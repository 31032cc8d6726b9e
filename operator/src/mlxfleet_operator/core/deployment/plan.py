"""A ModelDeployment and its SwapPlans: the plan that governs its replicas now (what it changed,
moved and is bringing up), whether a new plan is due, and the plan to create.

A model change of kept replicas is never written by the deployment's reconcile: it hands the
change to a SwapPlan (one node at a time, zero-drop, rolled back on failure), and follows it.
`PlanInfo` is what the deployment needs of a plan; `core.swapplan.effects` (a layer above) reads
a SwapPlan's steps into one (`plan_info`) and picks the plan that governs (`governing`).
May import: the standard library, `api`, the kit (`events`, `naming`), `core.fleet.placement`.
Called by: the ModelDeployment handler, the other `core.deployment` modules, `core.sharded`
and `core.swapplan.effects`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mlxfleet_operator.api import base, deploymentspec, resources
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import events, naming


@dataclass(frozen=True)
class PlanInfo:
    """The SwapPlan named in the deployment's status, as far as the deployment cares."""

    name: str
    target: ModelRef
    phase: swp.SwapPhase | None
    paused: bool
    # nodes whose model the plan's steps changed (or reverted), and what each now serves
    serving: Mapping[str, ModelRef] = field(default_factory=dict)
    moves: Mapping[str, str] = field(default_factory=dict)  # replica from node -> to node
    holds: frozenset[str] = frozenset()  # nodes where the plan is bringing up a replica
    message: str | None = None
    created: str | None = None  # creationTimestamp (ISO), to order plans
    started: bool = False  # a step ran (a plan refused up front changed nothing)
    # sharded: group index -> (formation id, model, nodes by rank) a group step formed
    groups: Mapping[int, tuple[str, ModelRef, tuple[str, ...]]] = field(default_factory=dict)
    swapping: frozenset[int] = frozenset()  # groups whose step runs (the plan writes them)
    failed_groups: Mapping[int, str] = field(default_factory=dict)  # index -> broken formation

    @property
    def active(self) -> bool:
        return self.phase is None or not self.phase.terminal

    @property
    def failed_after_start(self) -> bool:
        """It ended without reaching its target, after a step changed something."""
        ended = self.phase in (swp.SwapPhase.ROLLED_BACK, swp.SwapPhase.FAILED)
        return ended and self.started


def plan_due(
    md: mdep.ModelDeployment,
    desired: Mapping[str, ModelRef],
    decision: placement.Decision,
    plan: PlanInfo | None,
) -> bool:
    """A kept replica serves another model than the spec's, and no plan covers that change."""
    target = md.model_ref()
    if not any(desired[n] != target for n in decision.kept):
        return False
    return plan is None or (not plan.active and plan.target != target)


def new_plan(md: mdep.ModelDeployment, nodes: Sequence[str]) -> swp.SwapPlan:
    """The SwapPlan for the spec's model change on `nodes` (those carrying a replica; sharded:
    each group's rank 0), deterministic name: a repeat finds it."""
    model = md.model_ref()
    generation = md.metadata.generation or 0
    name = naming.swap_plan_name(md.metadata.name or "", model, generation=generation)
    return swp.SwapPlan(
        metadata=base.ObjectMeta(
            name=name,
            namespace=md.metadata.namespace,
            labels=naming.deployment_labels(md.metadata.name or ""),
            annotations={resources.DEPLOYMENT_ANNOTATION: md.metadata.name or ""},
            owner_references=[
                base.OwnerReference(
                    api_version=resources.API_VERSION,
                    kind=resources.MODEL_DEPLOYMENT.kind,
                    name=md.metadata.name or "",
                    uid=md.metadata.uid or "",
                    controller=True,
                )
            ],
        ),
        spec=swp.SwapPlanSpec(
            deployment_ref=swp.DeploymentRef(name=md.metadata.name or ""),
            target=swp.SwapTarget(source=model.source, revision=model.revision),
            nodes=list(nodes),
            paused=md.spec.swap.approval == deploymentspec.SwapApproval.MANUAL,
        ),
    )


def wire(plan: swp.SwapPlan) -> base.JsonDict:
    """The body to create `plan` with (no status: the operator writes it on its first run)."""
    return plan.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"status"})


def created(md: mdep.ModelDeployment, plan: swp.SwapPlan) -> PlanInfo:
    """The deployment's view of a plan it creates now (or found made before)."""
    return PlanInfo(
        name=plan.metadata.name or "",
        target=md.model_ref(),
        phase=None,
        paused=plan.spec.paused,
    )


def created_event(plan: swp.SwapPlan) -> events.Event:
    """The Event on the deployment when it created `plan`."""
    replicas = len(plan.spec.nodes or ())
    text = f"SwapPlan {plan.metadata.name}: {replicas} replicas to {plan.spec.target.source}"
    return events.Event(reason="SwapPlanCreated", message=text)

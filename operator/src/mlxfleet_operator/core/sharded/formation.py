"""Which formation each placed group of a sharded ModelDeployment has (pure), and who writes its
ranks: the deployment, or the SwapPlan that governs it.

A kept group keeps its formation and its model: a model change goes through a SwapPlan
(`plan_due`, `new_plan`), whose group steps (`core.swapplan.groups`) write the new formation's
ranks; while a step runs, its group is the plan's (`Governed`): not re-formed and not PUT by the
deployment. A broken group re-forms under the next id (`ring.next_id`) on the spec's model.

May import: the standard library, `api`, `core.fleet`, `core.deployment`, `core.sharded.ring`.
Called by: the sharded ModelDeployment handler and `core.swapplan.groups` (through
`core.sharded`), `core.sharded.ranks`, `health` and `groupstatus`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.sharded import ring


@dataclass(frozen=True)
class Formation:
    index: int
    id: str
    plan: groupplacement.GroupPlan
    hosts: tuple[str, ...]  # ring address per rank
    model: ModelRef  # what its ranks load


@dataclass(frozen=True)
class Governed:
    """What a deployment's governing SwapPlan says about its groups (`plans.PlanInfo.groups`)."""

    pinned: Mapping[int, tuple[str, ModelRef, tuple[str, ...]]]  # index -> id, model, nodes
    swapping: frozenset[int]  # groups whose step runs: the plan writes their ranks
    failed: Mapping[int, str]  # index -> the formation id a failed step left broken
    open: bool = False  # a plan runs (or waits): it alone changes the kept groups

    def writes(self, form: Formation, broken: frozenset[int]) -> bool:
        """The plan writes this group's ranks, not the deployment: its step runs, or a plan is
        open and the group is kept (a step's PUT the plan has not recorded yet must never be
        overwritten with the old formation). A group re-forming after a loss is the
        deployment's."""
        if form.index in self.swapping:
            return True
        return self.open and form.plan.kept and form.index not in broken

    @classmethod
    def of(cls, md: mdep.ModelDeployment, plan: plans.PlanInfo | None) -> Governed:
        """A step's formation applies while the plan runs, and afterwards until the status
        shows it (then the group is kept as any other)."""
        if plan is None:
            return cls({}, frozenset(), {})
        shown = {g.index: ModelRef(g.source or "", g.revision) for g in md.status.groups}
        pinned = {i: p for i, p in plan.groups.items() if plan.active or shown.get(i) != p[1]}
        swapping = plan.swapping if plan.active else frozenset()
        return cls(pinned, swapping, plan.failed_groups, open=plan.active)


def formations(
    md: mdep.ModelDeployment,
    decision: groupplacement.GroupDecision,
    facts: Mapping[str, dep.NodeFacts],
    broken: frozenset[int],
    *,
    slot: str,
    governed: Governed | None = None,
) -> list[Formation]:
    """Each placed group's formation: the one its SwapPlan step formed (`governed`); else its
    old id and model while kept and healthy (a model change is a SwapPlan's); else a new one on
    the spec's model."""
    before = {g.index: g for g in md.status.groups}
    pinned = governed.pinned if governed is not None else {}
    out = []
    for plan in decision.groups:
        old = before.get(plan.index)
        step = pinned.get(plan.index)
        if step is not None and step[2] == plan.nodes:
            gid, model = step[0], step[1]
        elif old is not None and plan.kept and plan.index not in broken:
            gid, model = old.id, ModelRef(old.source or md.model_ref().source, old.revision)
        else:
            gid, model = ring.next_id(plan.index, old.id if old else None), md.model_ref()
        addresses = ring.hosts(
            facts, plan.nodes, slot=slot, group_id=gid, salt=md.metadata.uid or ""
        )
        out.append(Formation(index=plan.index, id=gid, plan=plan, hosts=addresses, model=model))
    return out


def forming(
    forms: Sequence[Formation],
    facts: Mapping[str, dep.NodeFacts],
    fresh: frozenset[str],
    governed: Governed,
    *,
    slot: str,
    broken: frozenset[int] = frozenset(),
) -> dict[str, ModelRef]:
    """The nodes (answering) about to get a rank of a new formation, with the model it loads:
    they should copy the weights first (from peers). A group a SwapPlan writes is the plan's
    (it prefetches on every rank's node itself)."""
    out: dict[str, ModelRef] = {}
    for f in forms:
        if governed.writes(f, broken):
            continue
        for r in f.plan.ranks:
            fact = facts.get(r.node)
            if fact is None or r.node not in fresh:
                continue
            observed = fact.slot(slot)
            spec = observed.spec if observed is not None else None
            if spec is None or spec.shard is None or spec.shard.group != f.id:
                out[r.node] = f.model
    return out


def plan_due(
    md: mdep.ModelDeployment, forms: Sequence[Formation], plan: plans.PlanInfo | None
) -> bool:
    """A kept group serves another model than the spec's, and no plan covers that change."""
    target = md.model_ref()
    if not any(f.model != target for f in forms):
        return False
    return plan is None or (not plan.active and plan.target != target)


def new_plan(md: mdep.ModelDeployment, forms: Sequence[Formation]) -> swp.SwapPlan:
    """The SwapPlan for the spec's model change: a step per group not on it (rank 0's node)."""
    target = md.model_ref()
    return plans.new_plan(md, [f.plan.nodes[0] for f in forms if f.model != target])

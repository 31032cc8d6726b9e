"""A sharded deployment's SwapPlan: one step per group, the group swapped as a unit.

A group step is named by its rank 0's node and lists the group's nodes by rank (`steps`). When
it starts, `decide` chooses Surge or Hold for the whole group (`groupplacement.swap_mode`: Surge
when every node of the group has room for its old rank and the new one at once, else Hold; an
explicit Surge or Hold in the plan's or the deployment's strategy wins) and says why, and names the
new formation (a new id, so new ring ports). `requests` are the new formation's rank slots, each
carrying the plan's strategy and the step's request id: every rank's agent swaps its rank (the
agent's swap protocol: Surge forms the new group beside the old one, rank 0 switches once the new
group answers, then drains its old rank, whose followers end with it; Hold drains and stops the
old group first, requests queue at rank 0). The step follows rank 0's swap record.

May import: the standard library, `api`, the agent `contract`, `core.sharded`, `core.fleet`
(`facts`, `nodeviews`, `groupplacement`), `state`. Called by: `progress` (steps, the
decision when a step starts) and the SwapPlan handler (`planning`, `requests`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from mlxfleet_operator.api import fields
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import sharded
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement, nodeviews
from mlxfleet_operator.core.swapplan import state as st

Strategy = fields.SwapStrategy
NO_GROUP = "no group has its rank 0 on this node"


@dataclass(frozen=True)
class Group:
    """One group of the deployment as its status shows it."""

    index: int
    id: str
    nodes: tuple[str, ...]  # by rank
    memory: Mapping[str, int] = field(default_factory=dict)  # bytes each rank holds now


def current(md: mdep.ModelDeployment) -> tuple[Group, ...]:
    out = []
    for g in sorted(md.status.groups, key=lambda g: g.index):
        ranks = sorted(g.ranks, key=lambda r: r.rank)
        memory = {r.node: r.memory_bytes or 0 for r in ranks}
        out.append(Group(g.index, g.id, tuple(r.node for r in ranks), memory))
    return tuple(out)


def initial_steps(
    nodes: Sequence[str], groups: Sequence[Group], known: Collection[str] | None = None
) -> tuple[swp.SwapStep, ...]:
    """One step per listed node that is a group's rank 0 (others are skipped, saying why)."""
    by_leader = {g.nodes[0]: g for g in groups if g.nodes}
    out = []
    for node in dict.fromkeys(nodes):
        step = swp.SwapStep(node=node, phase=swp.StepPhase.PENDING)
        group = by_leader.get(node)
        if known is not None and node not in known:
            step = st.skipped(step, st.unknown(node))
        elif group is None:
            step = st.skipped(step, NO_GROUP)
        else:
            step = st.update(step, group=group.index, ranks=list(group.nodes))
        out.append(step)
    return tuple(out)


@dataclass(frozen=True)
class Decision:
    """How a group swaps: the strategy, why, the new formation's id and its rank slots."""

    strategy: Strategy
    reason: str
    group_id: str
    requests: tuple[dep.SlotRequest, ...]  # without the step's request id


@dataclass(frozen=True)
class Planning:
    """What a sharded plan's steps need: the groups, and each group's decision (a text: why it
    cannot start yet)."""

    groups: tuple[Group, ...]
    decisions: Mapping[int, Decision | str]


def decide(
    md: mdep.ModelDeployment,
    target: ModelRef,
    group: Group,
    facts: Sequence[dep.NodeFacts],
    *,
    slot: str,
    strategy: Strategy | None,
    drain_timeout_seconds: int | None,
    step: swp.SwapStep | None = None,
) -> Decision | str:
    """The group's swap to `target` on its nodes. A step that already started keeps its
    strategy, reason and formation id (only the rank slots are built again)."""
    cached = sharded.cached_model(md, facts, model=target)
    if cached is None:
        return f"waiting for the size of {target} (its weights are being fetched)"
    request = sharded.group_request(md, cached, model=target)
    views = {f.name: nodeviews.node_view(f, slot=slot) for f in facts}
    if missing := [n for n in group.nodes if n not in views]:
        return f"waiting for node {', '.join(missing)} (no InferenceNode or no answer yet)"
    ranks, short = groupplacement.plan_ranks(request, [views[n] for n in group.nodes])
    plan = groupplacement.GroupPlan(index=group.index, ranks=ranks, kept=True)
    if step is not None and step.group_id and step.strategy and step.strategy_reason:
        chosen, why, gid = step.strategy, step.strategy_reason, step.group_id
    elif short:
        return "cannot start: " + "; ".join(f"{r.node}: {r.message}" for r in short)
    else:
        chosen, why = choose(
            strategy or md.spec.swap.strategy,
            groupplacement.swap_mode(request, list(views.values()), group.memory, plan),
        )
        gid = sharded.next_id(group.index, group.id)
    by_name = {f.name: f for f in facts}
    form = sharded.Formation(
        index=group.index,
        id=gid,
        plan=plan,
        hosts=sharded.hosts(
            by_name, group.nodes, slot=slot, group_id=gid, salt=md.metadata.uid or ""
        ),
        model=target,
    )
    agent_strategy = fields.to_agent_strategy(chosen)
    specs = tuple(
        dep.SlotRequest(
            r.node,
            sharded.rank_spec(
                md,
                form,
                r,
                strategy=agent_strategy,
                drain_timeout_seconds=drain_timeout_seconds,
            ),
        )
        for r in ranks
    )
    return Decision(strategy=chosen, reason=why, group_id=gid, requests=specs)


def choose(requested: Strategy, mode: tuple[groupplacement.SwapMode, str]) -> tuple[Strategy, str]:
    """Auto: what the group's memory allows (`groupplacement.swap_mode`, with its reason); an
    explicit Surge or Hold is followed, saying so (and, for Surge, what memory would have
    chosen)."""
    found, why = mode
    if requested == Strategy.HOLD:
        return Strategy.HOLD, "hold: the swap strategy asks for Hold"
    if requested == Strategy.SURGE:
        suffix = "" if found == groupplacement.SwapMode.SURGE else f" (memory alone: {why})"
        return Strategy.SURGE, "surge: the swap strategy asks for Surge" + suffix
    return Strategy(found.value), why


def planning(
    md: mdep.ModelDeployment,
    target: ModelRef,
    facts: Sequence[dep.NodeFacts],
    steps: Sequence[swp.SwapStep],
    *,
    slot: str,
    strategy: Strategy | None,
    drain_timeout_seconds: int | None,
) -> Planning:
    """The groups and the decision of every group a step of the plan swaps (or will)."""
    groups = current(md)
    by_index = {s.group: s for s in steps if s.group is not None}
    decisions: dict[int, Decision | str] = {}
    for group in groups:
        step = by_index.get(group.index)
        if step is not None and step.phase not in (*st.RUNNING, swp.StepPhase.PENDING):
            continue
        if step is not None and step.ranks:
            group = Group(group.index, group.id, tuple(step.ranks), group.memory)
        decisions[group.index] = decide(
            md,
            target,
            group,
            facts,
            slot=slot,
            strategy=strategy,
            drain_timeout_seconds=drain_timeout_seconds,
            step=step,
        )
    return Planning(groups=groups, decisions=decisions)


def requests(planning_: Planning, actions: Sequence[st.Action]) -> tuple[dep.SlotRequest, ...]:
    """The rank slots each `PutGroup` asks for, with its request id."""
    out: list[dep.SlotRequest] = []
    for action in actions:
        if not isinstance(action, st.PutGroup):
            continue
        decision = planning_.decisions.get(action.group)
        if not isinstance(decision, Decision):
            continue
        out.extend(dep.SlotRequest(r.node, r.spec, action.request_id) for r in decision.requests)
    return tuple(out)

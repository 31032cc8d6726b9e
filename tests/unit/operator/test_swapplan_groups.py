"""A sharded deployment's SwapPlan (core.swapplan.groups, progress, effects; core.sharded): a
step per group named by rank 0, Surge or Hold decided for the whole group with the reason, the
new formation's rank slots, following rank 0's record, and what the deployment keeps meanwhile."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.api import fields
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import sharded
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.core.swapplan import effects, gate, groups, progress
from mlxfleet_operator.core.swapplan import state as st
from tests.unit.operator import builders
from tests.unit.operator.builders import GIB, SHAPE, fact, state

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OLD, NEW = "file:///models/a", "file:///models/b"
TARGET = ModelRef(NEW)
SLOT = naming.slot_name("ns", "big")
Strategy = fields.SwapStrategy


def deployment(source: str = NEW, **spec: Any) -> mdep.ModelDeployment:
    """A 1-group, 2-rank deployment whose status shows group 0 (g0-1) on a, b serving OLD."""
    ranks = [
        {"rank": 0, "node": "a", "ready": True, "memoryBytes": 3 * GIB},
        {"rank": 1, "node": "b", "ready": True, "memoryBytes": 3 * GIB},
    ]
    group = {"index": 0, "id": "g0-1", "ready": True, "source": OLD, "ranks": ranks}
    return builders.sharded_md(source, groups=[group], **spec)


def facts(budget: int, *, cached: bool = True, used: int = 0) -> list[Any]:
    """Agents a, b, c; a and b run the old ranks (3 GiB each), `used` bytes of other slots."""
    models = [contract.CachedModel(id="b", source=NEW, size_bytes=4 * GIB, shape=SHAPE)]
    others = [
        contract.SlotStatus(
            name="other",
            served_name="x",
            source=OLD,
            phase="Ready",
            ready=True,
            estimated_memory_bytes=used,
        )
    ]
    return [
        fact(n, state(budget=budget, cached=models if cached else (), slots=others if used else ()))
        for n in ("a", "b", "c")
    ]


def decide(md: mdep.ModelDeployment, budget: int, **kw: Any) -> groups.Decision | str:
    group = groups.current(md)[0]
    return groups.decide(
        md,
        TARGET,
        group,
        kw.pop("found", None) or facts(budget, **kw),
        slot=SLOT,
        strategy=None,
        drain_timeout_seconds=30,
    )


def test_surge_when_every_node_has_room_for_old_and_new_ranks() -> None:
    md = deployment()
    decision = decide(md, 64 * GIB)
    assert isinstance(decision, groups.Decision)
    assert decision.strategy == Strategy.SURGE
    assert decision.reason == "surge: every node of the new group has room for old + new ranks"
    assert decision.group_id == "g0-2"  # a new formation: new ring ports beside the old ones
    assert [r.node for r in decision.requests] == ["a", "b"]
    shards = [r.spec.shard for r in decision.requests]
    assert [(s.rank, s.group, s.world_size) for s in shards if s is not None] == [
        (0, "g0-2", 2),
        (1, "g0-2", 2),
    ]
    assert {r.spec.source for r in decision.requests} == {NEW}
    assert {r.spec.swap.strategy for r in decision.requests} == {contract.SwapStrategy.SURGE}
    assert {r.spec.swap.drain_timeout_seconds for r in decision.requests} == {30}
    old_ports = {sharded.ring_port(SLOT, "g0-1", r, salt=md.metadata.uid or "") for r in (0, 1)}
    assert not old_ports & {int(h.rsplit(":", 1)[1]) for h in shards[0].hosts}  # type: ignore[union-attr]


def test_hold_when_a_node_lacks_room_for_both_naming_it_and_the_numbers() -> None:
    decision = decide(deployment(), 64 * GIB, used=60 * GIB)  # 4 GiB left: old 3 + new > 4
    assert isinstance(decision, groups.Decision)
    assert decision.strategy == Strategy.HOLD
    assert decision.reason.startswith("hold: a: old + new rank need ")
    assert "b: old + new rank need" in decision.reason
    assert "budget left 4.00 GiB" in decision.reason
    assert {r.spec.swap.strategy for r in decision.requests} == {contract.SwapStrategy.HOLD}


@pytest.mark.parametrize(
    ("requested", "mode", "expected", "why"),
    [
        pytest.param(
            Strategy.AUTO,
            groupplacement.SwapMode.SURGE,
            Strategy.SURGE,
            "surge: room",
            id="auto-surge",
        ),
        pytest.param(
            Strategy.AUTO,
            groupplacement.SwapMode.HOLD,
            Strategy.HOLD,
            "hold: a short",
            id="auto-hold",
        ),
        pytest.param(
            Strategy.HOLD,
            groupplacement.SwapMode.SURGE,
            Strategy.HOLD,
            "hold: the swap strategy asks for Hold",
            id="explicit-hold",
        ),
        pytest.param(
            Strategy.SURGE,
            groupplacement.SwapMode.HOLD,
            Strategy.SURGE,
            "surge: the swap strategy asks for Surge (memory alone: hold: a short)",
            id="explicit-surge-says-what-memory-would-choose",
        ),
    ],
)
def test_an_explicit_strategy_wins_and_says_so(
    requested: Strategy, mode: groupplacement.SwapMode, expected: Strategy, why: str
) -> None:
    text = "surge: room" if mode == groupplacement.SwapMode.SURGE else "hold: a short"
    assert groups.choose(requested, (mode, text)) == (expected, why)


def test_the_deployment_strategy_applies_when_the_plan_sets_none() -> None:
    decision = decide(deployment(swap={"strategy": "Hold"}), 64 * GIB)
    assert isinstance(decision, groups.Decision)
    assert decision.strategy == Strategy.HOLD


def test_waits_for_the_target_size_and_refuses_a_rank_that_fits_nowhere() -> None:
    assert decide(deployment(), 64 * GIB, cached=False) == (
        f"waiting for the size of {TARGET} (its weights are being fetched)"
    )
    tight = decide(deployment(), 64 * GIB, used=63 * GIB)
    assert isinstance(tight, str)
    assert tight.startswith("cannot start: a: rank 0 needs")


def test_a_started_step_keeps_its_strategy_and_formation() -> None:
    started = swp.SwapStep(
        node="a",
        phase=swp.StepPhase.LOADING,
        group=0,
        ranks=["a", "b"],
        group_id="g0-7",
        strategy=Strategy.HOLD,
        strategy_reason="hold: chosen before",
    )
    md = deployment()
    decision = groups.decide(
        md,
        TARGET,
        groups.current(md)[0],
        facts(64 * GIB),  # room for a surge now: the step still holds
        slot=SLOT,
        strategy=None,
        drain_timeout_seconds=None,
        step=started,
    )
    assert isinstance(decision, groups.Decision)
    assert (decision.strategy, decision.reason, decision.group_id) == (
        Strategy.HOLD,
        "hold: chosen before",
        "g0-7",
    )


def record(outcome: contract.SwapOutcome | None, request: str) -> contract.SwapRecord:
    data: dict[str, object] = {
        "id": "r",
        "slot": SLOT,
        "request_id": request,
        "requested_strategy": "surge",
        "strategy": "surge",
        "from_source": OLD,
        "to_source": NEW,
        "started_at": T0 + timedelta(seconds=1),
        "outcome": outcome,
        "requests_served": 7,
        "requests_failed": 0,
    }
    if outcome is not None:
        data |= {
            "new_ready_at": T0 + timedelta(seconds=2),
            "switched_at": T0 + timedelta(seconds=2),
            "old_drained_at": T0 + timedelta(seconds=3),
            "finished_at": T0 + timedelta(seconds=3),
        }
    if outcome == contract.SwapOutcome.ROLLED_BACK:
        data |= {"reason": "BackendFailed: ring timed out", "switched_at": None}
    return contract.SwapRecord.model_validate(data)


def leader(source: str, *swaps: contract.SwapRecord) -> st.NodeSlot:
    return st.NodeSlot(
        reachable=True, model=ModelRef(source), ready=True, swaps=swaps, offset=timedelta(0)
    )


def advance(state: st.PlanState, slot_a: st.NodeSlot, seconds: float) -> st.Advance:
    md = deployment()
    planning = groups.planning(
        md,
        TARGET,
        facts(64 * GIB),
        state.steps,
        slot=SLOT,
        strategy=None,
        drain_timeout_seconds=None,
    )
    return progress.advance(
        state,
        target=TARGET,
        nodes=["a", "b"],
        paused=False,
        slots={"a": slot_a, "b": leader(OLD)},
        now=T0 + timedelta(seconds=seconds),
        groups=planning,
    )


def test_a_group_step_starts_with_its_decision_and_puts_every_rank() -> None:
    first = advance(st.PlanState(plan_id="p"), leader(OLD), 0)
    group_step, other = first.state.steps
    assert (other.phase, other.message) == (swp.StepPhase.SKIPPED, groups.NO_GROUP)
    assert (group_step.group, group_step.ranks, group_step.phase) == (
        0,
        ["a", "b"],
        swp.StepPhase.LOADING,
    )
    assert (group_step.strategy, group_step.group_id) == (Strategy.SURGE, "g0-2")
    assert group_step.strategy_reason is not None
    assert group_step.message == f"{group_step.strategy_reason}; swap requested"
    assert first.actions == (st.PutGroup(0, "p.0"),)
    planning = groups.planning(
        deployment(),
        TARGET,
        facts(64 * GIB),
        first.state.steps,
        slot=SLOT,
        strategy=None,
        drain_timeout_seconds=None,
    )
    puts = groups.requests(planning, first.actions)
    assert [(r.node, r.request_id) for r in puts] == [("a", "p.0"), ("b", "p.0")]
    # the step follows rank 0's record; on completion it keeps saying why it surged
    running = advance(first.state, leader(OLD, record(None, "p.0")), 1)
    assert running.state.steps[0].message == f"{group_step.strategy_reason}; swapping"
    done = advance(running.state, leader(NEW, record(contract.SwapOutcome.COMPLETED, "p.0")), 4)
    finished = done.state.steps[0]
    assert finished.phase == swp.StepPhase.COMPLETED
    assert finished.message == group_step.strategy_reason
    assert (finished.requests_served, finished.requests_failed) == (7, 0)
    assert done.state.phase == swp.SwapPhase.COMPLETED


def test_a_group_step_waits_while_the_target_is_not_sized() -> None:
    md = deployment()
    planning = groups.planning(
        md,
        TARGET,
        facts(64 * GIB, cached=False),
        (),
        slot=SLOT,
        strategy=None,
        drain_timeout_seconds=None,
    )
    waiting = progress.advance(
        st.PlanState(),
        target=TARGET,
        nodes=["a"],
        paused=False,
        slots={"a": leader(OLD)},
        now=T0,
        groups=planning,
    )
    assert waiting.actions == ()
    assert waiting.state.steps[0].phase == swp.StepPhase.PENDING
    assert "waiting for the size of" in (waiting.state.message or "")


def test_a_failed_group_step_is_not_reverted_and_leaves_its_formation_broken() -> None:
    first = advance(st.PlanState(plan_id="p"), leader(OLD), 0)
    failed = advance(first.state, leader(OLD, record(contract.SwapOutcome.ROLLED_BACK, "p.0")), 5)
    assert failed.actions == ()  # rank 0 went back on its own; no non-rank PUT to it
    assert failed.state.phase == swp.SwapPhase.ROLLED_BACK
    assert failed.state.steps[0].phase == swp.StepPhase.ROLLED_BACK
    assert effects.failed_groups(failed.state.steps) == {0: "g0-2"}
    assert effects.groups(failed.state.steps, TARGET) == {}


def on_a_and_b(*, kept: bool) -> groupplacement.GroupDecision:
    """Placement's decision: group 0 on a (rank 0) and b."""
    ranks = (
        groupplacement.RankPlan(0, "a", 3 * GIB, 2),
        groupplacement.RankPlan(1, "b", 3 * GIB, 2),
    )
    return groupplacement.GroupDecision(
        groups=(groupplacement.GroupPlan(index=0, ranks=ranks, kept=kept),),
        rejections=(),
        missing=0,
    )


def test_the_deployment_keeps_old_groups_and_follows_the_steps() -> None:
    md = deployment()
    found = {f.name: f for f in facts(64 * GIB)}
    decision = on_a_and_b(kept=True)
    kept = sharded.formations(md, decision, found, frozenset(), slot=SLOT)
    assert [(f.id, f.model) for f in kept] == [("g0-1", ModelRef(OLD))]  # no restart: a plan
    assert sharded.plan_due(md, kept, None)
    plan = sharded.new_plan(md, kept)
    assert plan.spec.nodes == ["a"]
    steps = [
        swp.SwapStep(
            node="a",
            phase=swp.StepPhase.SWITCHING,
            group=0,
            ranks=["a", "b"],
            group_id="g0-2",
        )
    ]
    info = plans.PlanInfo(
        name="p",
        target=TARGET,
        phase=swp.SwapPhase.PROGRESSING,
        paused=False,
        groups=effects.groups(steps, TARGET),
        swapping=effects.swapping(steps),
    )
    governed = sharded.Governed.of(md, info)
    assert governed.swapping == frozenset({0})
    followed = sharded.formations(md, decision, found, frozenset(), slot=SLOT, governed=governed)
    assert [(f.id, f.model) for f in followed] == [("g0-2", TARGET)]
    assert not sharded.plan_due(md, followed, info)
    # a swapping group is the plan's: a failed rank of it does not make the deployment re-form it
    assert 0 not in sharded.broken_groups(md, {}, frozenset(), slot=SLOT, governed=governed)
    assert 0 in sharded.broken_groups(md, {}, frozenset(), slot=SLOT)
    # while a plan is open, it alone writes kept groups (a step's PUT not yet in its status is
    # never overwritten with the old formation); a group re-forming after a loss is not its
    assert governed.writes(followed[0], frozenset())
    pending = sharded.Governed.of(md, plans.created(md, plan))
    assert pending.swapping == frozenset()
    assert pending.writes(kept[0], frozenset())
    assert not pending.writes(kept[0], frozenset({0}))
    assert not sharded.Governed.of(md, None).writes(kept[0], frozenset())


def rank_fact(group: str, *, ready: bool, swapping: bool = False) -> Any:
    phase = "Swapping" if swapping else ("Ready" if ready else "Loading")
    return builders.rank("a", group, slot=SLOT, source=NEW, phase=phase, ready=ready, swap=swapping)


@pytest.mark.parametrize(
    ("observed", "lost"),
    [
        pytest.param(rank_fact("g0-1", ready=True), False, id="serving-its-formation"),
        pytest.param(rank_fact("g0-1", ready=False), True, id="not-ready-peer-lost"),
        pytest.param(rank_fact("g0-2", ready=True, swapping=True), False, id="swap-old-serves"),
        pytest.param(rank_fact("g0-2", ready=True), False, id="swapped-new-serves"),
        pytest.param(rank_fact("g0-2", ready=False, swapping=True), True, id="hold-not-serving"),
    ],
)
def test_the_group_watch_does_not_take_a_swapping_group_out(observed: Any, lost: bool) -> None:
    assert sharded.rank_lost(observed, slot=SLOT, group_id="g0-1", fresh=True) is lost


def test_a_new_formation_prefetches_on_ranks_not_yet_in_it() -> None:
    md = deployment()
    found = {
        "a": rank_fact("g0-2", ready=True),  # already in the new formation: nothing to copy
        "b": fact("b"),  # no slot yet
    }
    decision = on_a_and_b(kept=False)
    forms = sharded.formations(md, decision, found, frozenset({0}), slot=SLOT)
    assert [f.id for f in forms] == ["g0-2"]
    none = sharded.Governed.of(md, None)
    fresh = frozenset({"a", "b"})
    assert sharded.forming(forms, found, fresh, none, slot=SLOT) == {"b": TARGET}
    assert sharded.forming(forms, found, frozenset({"a"}), none, slot=SLOT) == {}
    swapping = sharded.Governed({}, frozenset({0}), {})  # the plan prefetches its groups itself
    assert sharded.forming(forms, found, fresh, swapping, slot=SLOT) == {}


def test_a_sharded_plan_runs_on_rank_0_and_prefetches_on_every_rank() -> None:
    plan = swp.SwapPlan.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"deploymentRef": {"name": "big"}, "target": {"source": NEW}},
        }
    )
    scope = gate.scope(plan, deployment(), st.PlanState())
    assert (scope.nodes, scope.watched, scope.prefetch) == (("a",), ("a",), ("a", "b"))
    assert scope.replicas is None  # no moves for groups

"""SwapPlan state machine: one node at a time, resume without repeating, rollback, pause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.swapplan import effects, progress
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import steps as plan_steps

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OLD = "file:///models/a"
NEW = "file:///models/b"
TARGET = ModelRef(NEW)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(start: float, outcome: contract.SwapOutcome | None, **kw: object) -> contract.SwapRecord:
    data: dict[str, object] = {
        "id": f"s{start}",
        "slot": "slot",
        "requested_strategy": "auto",
        "strategy": "surge",
        "from_source": OLD,
        "to_source": NEW,
        "started_at": at(start),
        "outcome": outcome,
        "requests_served": 10,
        "requests_failed": 0,
    }
    if outcome is not None:
        data["finished_at"] = at(start + 3)
        data["switched_at"] = at(start + 2)
    data.update(kw)
    return contract.SwapRecord.model_validate(data)


def slot(source: str = OLD, *swaps: contract.SwapRecord, ready: bool = True) -> st.NodeSlot:
    return st.NodeSlot(reachable=True, model=ModelRef(source), ready=ready, swaps=swaps)


def step(
    state: st.PlanState, slots: dict[str, st.NodeSlot], now: float, *, paused: bool = False
) -> st.Advance:
    return progress.advance(
        state, target=TARGET, nodes=["a", "b"], paused=paused, slots=slots, now=at(now)
    )


def test_runs_one_node_at_a_time_to_completion() -> None:
    first = step(st.PlanState(), {"a": slot(), "b": slot()}, 0)
    assert first.actions == (st.PutTarget("a"),)
    assert [s.phase for s in first.state.steps] == [swp.StepPhase.LOADING, swp.StepPhase.PENDING]
    assert first.state.phase == swp.SwapPhase.PROGRESSING
    # agent still swapping: nothing new is started on b
    mid = step(first.state, {"a": slot(OLD, record(1, None)), "b": slot()}, 2)
    assert mid.actions == ()
    assert mid.state.steps[1].phase == swp.StepPhase.PENDING
    done_a = step(
        mid.state, {"a": slot(NEW, record(1, contract.SwapOutcome.COMPLETED)), "b": slot()}, 5
    )
    assert done_a.actions == (st.PutTarget("b"),)
    a = done_a.state.steps[0]
    assert a.phase == swp.StepPhase.COMPLETED
    assert (a.requests_served, a.requests_failed, a.strategy) == (10, 0, "Surge")
    assert done_a.state.progress == "1/2"
    done = step(
        done_a.state, {"a": slot(NEW), "b": slot(NEW, record(6, contract.SwapOutcome.COMPLETED))}, 9
    )
    assert done.state.phase == swp.SwapPhase.COMPLETED
    assert done.state.progress == "2/2"
    assert done.state.completed_at == at(9)


def test_resume_never_repeats_a_finished_step() -> None:
    # status says a is done and b is running; the operator restarted before b's PUT went out
    state = st.PlanState(
        phase=swp.SwapPhase.PROGRESSING,
        steps=(
            swp.SwapStep(node="a", phase=swp.StepPhase.COMPLETED),
            swp.SwapStep(node="b", phase=swp.StepPhase.DRAINING, started_at=at(10)),
        ),
    )
    old_a = record(1, contract.SwapOutcome.COMPLETED)
    out = step(state, {"a": slot(NEW, old_a), "b": slot(OLD)}, 20)
    assert out.actions == (st.PutTarget("b"),)  # re-sent: declarative, harmless
    assert out.state.steps[0].phase == swp.StepPhase.COMPLETED
    # b's record from before the restart is followed, not a new swap
    done = step(
        out.state, {"a": slot(NEW), "b": slot(NEW, record(11, contract.SwapOutcome.COMPLETED))}, 25
    )
    assert done.actions == ()
    assert done.state.phase == swp.SwapPhase.COMPLETED


def test_record_from_an_older_swap_is_ignored() -> None:
    state = st.PlanState(
        steps=(swp.SwapStep(node="a", phase=swp.StepPhase.LOADING, started_at=at(1000)),)
    )
    out = progress.advance(
        state,
        target=TARGET,
        nodes=["a"],
        paused=False,
        slots={"a": slot(NEW, record(1, contract.SwapOutcome.COMPLETED))},
        now=at(1001),
    )
    assert out.state.steps[0].phase in st.RUNNING


def test_failed_step_rolls_back_and_stops() -> None:
    state = step(st.PlanState(), {"a": slot(), "b": slot()}, 0).state
    failed = record(1, contract.SwapOutcome.ROLLED_BACK, reason="backend exited with code 1")
    out = step(state, {"a": slot(OLD, failed), "b": slot()}, 5)
    assert out.state.phase == swp.SwapPhase.ROLLED_BACK
    assert "backend exited" in (out.state.message or "")
    assert out.state.steps[0].phase == swp.StepPhase.ROLLED_BACK
    assert out.state.steps[1].phase == swp.StepPhase.PENDING
    assert out.actions == (st.PutPrevious("a", ModelRef(OLD)),)
    again = step(out.state, {"a": slot(), "b": slot()}, 6)
    assert again.actions == ()
    assert again.state == out.state


def test_paused_plan_waits_then_runs() -> None:
    out = step(st.PlanState(), {"a": slot(), "b": slot()}, 0, paused=True)
    assert out.state.phase == swp.SwapPhase.PAUSED
    assert out.actions == ()
    assert out.state.progress == "0/2"
    resumed = step(out.state, {"a": slot(), "b": slot()}, 1)
    assert resumed.actions == (st.PutTarget("a"),)


def test_unreachable_node_waits_and_missing_slot_is_skipped() -> None:
    out = step(st.PlanState(), {"a": st.NodeSlot(reachable=False), "b": slot()}, 0)
    assert out.actions == ()
    assert "waiting for node a" in (out.state.message or "")
    skipped = step(out.state, {"a": st.NodeSlot(reachable=True), "b": slot()}, 1)
    assert skipped.state.steps[0].phase == swp.StepPhase.SKIPPED
    assert skipped.state.steps[0].message == "no replica on this node"
    assert skipped.actions == (st.PutTarget("b"),)


def test_node_already_on_target_is_skipped() -> None:
    out = step(st.PlanState(), {"a": slot(NEW), "b": slot(NEW)}, 0)
    assert out.state.phase == swp.SwapPhase.COMPLETED
    assert out.actions == ()


def test_no_nodes_fails() -> None:
    out = progress.advance(st.PlanState(), target=TARGET, nodes=[], paused=False, slots={}, now=T0)
    assert out.state.phase == swp.SwapPhase.FAILED


def test_plans_of_one_deployment_run_one_after_another() -> None:
    others = [("old", at(0), True), ("done", at(-10), False), ("new", at(5), True)]
    assert progress.waiting_for("new", at(5), others) == "old"
    assert progress.waiting_for("old", at(0), others) is None
    assert progress.waiting_for("x", None, [("old", at(0), True)]) == "old"
    assert not st.PlanState(steps=plan_steps.initial_steps(["a"])).started


# ------------------------------------------------------------------ rollback of the whole plan

NODES3 = ["a", "b", "c"]


def back(start: float, outcome: contract.SwapOutcome | None, **kw: object) -> contract.SwapRecord:
    """The agent's record of a revert: NEW -> OLD."""
    return record(start, outcome, from_source=NEW, to_source=OLD, **kw)


def step3(state: st.PlanState, slots: dict[str, st.NodeSlot], now: float) -> st.Advance:
    return progress.advance(
        state, target=TARGET, nodes=NODES3, paused=False, slots=slots, now=at(now)
    )


def plan_failing_at_b() -> st.Advance:
    """a swapped and completed, then b's swap failed (c never started)."""
    out = step3(st.PlanState(), {n: slot() for n in NODES3}, 0)
    assert out.state.steps[0].from_source == OLD  # what a swapped from, kept in status
    done_a = step3(
        out.state,
        {"a": slot(NEW, record(1, contract.SwapOutcome.COMPLETED)), "b": slot(), "c": slot()},
        5,
    )
    assert done_a.actions == (st.PutTarget("b"),)
    failed = record(6, contract.SwapOutcome.ROLLED_BACK, reason="backend exited with code 1")
    return step3(done_a.state, {"a": slot(NEW), "b": slot(OLD, failed), "c": slot()}, 10)


def test_fail_at_step_1_of_1_rolls_back_that_node_only() -> None:
    state = progress.advance(
        st.PlanState(), target=TARGET, nodes=["a"], paused=False, slots={"a": slot()}, now=at(0)
    ).state
    failed = record(1, contract.SwapOutcome.ROLLED_BACK, reason="load failed")
    out = progress.advance(
        state, target=TARGET, nodes=["a"], paused=False, slots={"a": slot(OLD, failed)}, now=at(5)
    )
    assert out.state.phase == swp.SwapPhase.ROLLED_BACK
    assert out.state.message == "step on a failed and was rolled back: load failed"
    assert out.actions == (st.PutPrevious("a", ModelRef(OLD)),)
    assert effects.serving(out.state.steps, ModelRef(NEW)) == {}


def test_fail_at_step_2_of_3_reverts_step_1_then_ends_rolled_back() -> None:
    out = plan_failing_at_b()
    assert out.state.phase == swp.SwapPhase.ROLLING_BACK
    assert [s.phase for s in out.state.steps] == [
        swp.StepPhase.REVERTING,
        swp.StepPhase.ROLLED_BACK,
        swp.StepPhase.PENDING,
    ]
    # b's desired state goes back to what it serves; a swaps back to the model it swapped from
    assert out.actions == (st.PutPrevious("b", ModelRef(OLD)), st.PutPrevious("a", ModelRef(OLD)))
    assert effects.serving(out.state.steps, ModelRef(NEW)) == {"a": ModelRef(OLD)}
    running = step3(out.state, {"a": slot(NEW, back(11, None)), "b": slot(), "c": slot()}, 12)
    assert running.actions == ()
    assert running.state.phase == swp.SwapPhase.ROLLING_BACK
    assert "reverting a" in (running.state.message or "")
    done = step3(
        running.state,
        {"a": slot(OLD, back(11, contract.SwapOutcome.COMPLETED)), "b": slot(), "c": slot()},
        15,
    )
    assert done.actions == ()
    assert done.state.phase == swp.SwapPhase.ROLLED_BACK
    assert [s.phase for s in done.state.steps] == [
        swp.StepPhase.REVERTED,
        swp.StepPhase.ROLLED_BACK,
        swp.StepPhase.PENDING,
    ]
    assert done.state.message == (
        "step on b failed and was rolled back: backend exited with code 1; reverted a"
    )
    revert = done.state.steps[0].revert
    assert revert is not None
    assert (revert.started_at, revert.requests_failed) == (at(10), 0)
    assert effects.serving(done.state.steps, ModelRef(NEW)) == {"a": ModelRef(OLD)}
    assert step3(done.state, {n: slot() for n in NODES3}, 20).state == done.state


def test_completed_steps_revert_one_at_a_time_last_first() -> None:
    state = st.PlanState(
        phase=swp.SwapPhase.PROGRESSING,
        steps=(
            swp.SwapStep(
                node="a", phase=swp.StepPhase.COMPLETED, from_source=OLD, started_at=at(0)
            ),
            swp.SwapStep(
                node="b", phase=swp.StepPhase.COMPLETED, from_source=OLD, started_at=at(5)
            ),
            swp.SwapStep(node="c", phase=swp.StepPhase.LOADING, from_source=OLD, started_at=at(10)),
        ),
    )
    failed = record(11, contract.SwapOutcome.ROLLED_BACK, reason="oom")
    out = step3(state, {"a": slot(NEW), "b": slot(NEW), "c": slot(OLD, failed)}, 15)
    assert out.actions == (st.PutPrevious("c", ModelRef(OLD)), st.PutPrevious("b", ModelRef(OLD)))
    assert out.state.steps[0].phase == swp.StepPhase.COMPLETED  # a waits for b's revert
    b_done = step3(
        out.state,
        {"a": slot(NEW), "b": slot(OLD, back(16, contract.SwapOutcome.COMPLETED)), "c": slot()},
        20,
    )
    assert b_done.actions == (st.PutPrevious("a", ModelRef(OLD)),)
    assert b_done.state.phase == swp.SwapPhase.ROLLING_BACK


def test_operator_restart_mid_revert_resumes_without_repeating() -> None:
    reverting = plan_failing_at_b().state
    # the status as a restarted operator reads it back (message comes from conditions only
    # once terminal); the revert's PUT may or may not have reached the agent
    restored = st.PlanState(
        phase=reverting.phase,
        steps=reverting.steps,
        started_at=reverting.started_at,
    )
    lost = step3(restored, {"a": slot(NEW), "b": slot(), "c": slot()}, 30)
    assert lost.actions == (st.PutPrevious("a", ModelRef(OLD)),)  # re-sent: declarative, harmless
    assert lost.state.steps[0].phase == swp.StepPhase.REVERTING
    assert "backend exited" in (lost.state.message or "")
    # the revert that started before the restart is followed, not started again
    seen = step3(
        restored,
        {"a": slot(OLD, back(11, contract.SwapOutcome.COMPLETED)), "b": slot(), "c": slot()},
        30,
    )
    assert seen.actions == ()
    assert seen.state.phase == swp.SwapPhase.ROLLED_BACK
    # a node already back on the previous model (and idle) is not swapped again
    idle = step3(
        st.PlanState(
            phase=swp.SwapPhase.ROLLING_BACK,
            steps=(
                swp.SwapStep(
                    node="a", phase=swp.StepPhase.COMPLETED, from_source=OLD, started_at=at(1)
                ),
                swp.SwapStep(node="b", phase=swp.StepPhase.ROLLED_BACK, message="x"),
            ),
        ),
        {"a": slot(OLD), "b": slot()},
        31,
    )
    assert idle.actions == ()
    assert idle.state.phase == swp.SwapPhase.ROLLED_BACK
    assert idle.state.steps[0].phase == swp.StepPhase.REVERTED


def test_a_revert_that_fails_ends_the_plan_failed_with_both_reasons() -> None:
    reverting = plan_failing_at_b().state
    bad = back(11, contract.SwapOutcome.ROLLED_BACK, reason="disk full")
    out = step3(reverting, {"a": slot(NEW, bad), "b": slot(), "c": slot()}, 15)
    assert out.state.phase == swp.SwapPhase.FAILED
    assert out.state.message == (
        "step on b failed and was rolled back: backend exited with code 1; "
        "reverting a failed: disk full"
    )
    assert out.state.steps[0].phase == swp.StepPhase.FAILED
    # a keeps serving (and is told to keep) what the agent rolled back to: the plan's target
    assert out.actions == (st.PutPrevious("a", ModelRef(NEW)),)
    assert effects.serving(out.state.steps, ModelRef(NEW)) == {"a": ModelRef(NEW)}


def test_rollback_runs_even_when_the_plan_is_paused() -> None:
    reverting = plan_failing_at_b().state
    out = progress.advance(
        reverting,
        target=TARGET,
        nodes=NODES3,
        paused=True,
        slots={"a": slot(NEW), "b": slot(), "c": slot()},
        now=at(12),
    )
    assert out.state.phase == swp.SwapPhase.ROLLING_BACK
    assert out.actions == (st.PutPrevious("a", ModelRef(OLD)),)


# ------------------------------------------------ a person's plan naming nodes without a replica


def move(
    state: st.PlanState,
    slots: dict[str, st.NodeSlot],
    now: float,
    *,
    nodes: list[str],
    replicas: list[str],
    allowed: list[str] | None = None,
) -> st.Advance:
    return progress.advance(
        state,
        target=ModelRef(OLD),  # moving the model it already serves
        nodes=nodes,
        paused=False,
        slots=slots,
        now=at(now),
        replicas=replicas,
        allowed=allowed,
    )


def empty() -> st.NodeSlot:
    return st.NodeSlot(reachable=True)


def test_listed_nodes_without_a_replica_pair_with_unlisted_replicas() -> None:
    steps = plan_steps.initial_steps(["a", "c", "d"], replicas=["a", "b"])
    assert [(s.node, s.replaces, s.phase) for s in steps] == [
        ("a", None, swp.StepPhase.PENDING),
        ("c", "b", swp.StepPhase.PENDING),
        ("d", None, swp.StepPhase.SKIPPED),  # nothing left to move there
    ]
    assert steps[2].message == "no replica on a node outside spec.nodes to move here"
    assert plan_steps.initial_steps(["a", "c"]) == (  # without replicas: order and restrict only
        swp.SwapStep(node="a"),
        swp.SwapStep(node="c"),
    )


def test_move_step_brings_up_the_new_replica_then_the_deployment_drops_the_old() -> None:
    slots = {"a": slot(OLD), "b": slot(OLD), "c": empty()}
    nodes = ["a", "c"]  # a keeps its replica (already on the target); b's moves to c
    first = move(st.PlanState(), slots, 0, nodes=nodes, replicas=["a", "b"])
    assert first.actions == (st.PutTarget("c"),)
    assert first.state.steps[0].phase == swp.StepPhase.COMPLETED
    assert first.state.steps[0].message == st.ON_TARGET
    step_c = first.state.steps[1]
    assert (step_c.replaces, step_c.phase, step_c.from_source) == ("b", swp.StepPhase.LOADING, OLD)
    assert effects.moves(first.state.steps) == {"b": "c"}
    assert effects.moving_to(first.state.steps) == {"c"}
    assert effects.serving(first.state.steps, ModelRef(OLD)) == {"c": ModelRef(OLD)}
    loading = move(
        first.state, {**slots, "c": slot(OLD, ready=False)}, 2, nodes=nodes, replicas=["a", "b"]
    )
    assert loading.actions == ()
    assert loading.state.phase == swp.SwapPhase.PROGRESSING
    done = move(loading.state, {**slots, "c": slot(OLD)}, 5, nodes=nodes, replicas=["a", "c"])
    assert done.state.phase == swp.SwapPhase.COMPLETED
    assert done.state.steps[1].message == "moved from b"
    assert effects.moves(done.state.steps) == {"b": "c"}
    assert effects.moving_to(done.state.steps) == frozenset()


def test_failed_new_replica_rolls_back_the_plan_and_earlier_moves_go_back() -> None:
    slots = {"a": slot(OLD), "b": slot(OLD), "c": empty(), "d": empty()}
    nodes, replicas = ["c", "d"], ["a", "b"]
    out = move(st.PlanState(), slots, 0, nodes=nodes, replicas=replicas)
    assert [s.replaces for s in out.state.steps] == ["a", "b"]
    out = move(out.state, {**slots, "c": slot(OLD)}, 3, nodes=nodes, replicas=replicas)
    assert out.actions == (st.PutTarget("d"),)
    broken = st.NodeSlot(reachable=True, model=ModelRef(OLD), failed="out of memory")
    failed = move(out.state, {**slots, "c": slot(OLD), "d": broken}, 6, nodes=nodes, replicas=[])
    assert failed.state.phase == swp.SwapPhase.ROLLING_BACK
    assert failed.state.steps[1].phase == swp.StepPhase.ROLLED_BACK
    assert effects.moves(failed.state.steps) == {"c": "a"}  # the move to c goes back to a
    assert failed.actions == (st.PutPrevious("a", ModelRef(OLD)),)
    # a's replica serves again (the deployment then drops c): the plan ends RolledBack
    gone_a = {**slots, "a": empty(), "c": slot(OLD), "d": empty()}
    waiting = move(failed.state, gone_a, 7, nodes=nodes, replicas=[])
    assert waiting.actions == (st.PutPrevious("a", ModelRef(OLD)),)  # re-sent while a has no slot
    back = move(waiting.state, {**gone_a, "a": slot(OLD)}, 9, nodes=nodes, replicas=[])
    assert back.state.phase == swp.SwapPhase.ROLLED_BACK
    assert back.state.message == (
        "step on d failed and was rolled back: new replica failed: out of memory; reverted c"
    )
    assert effects.serving(back.state.steps, ModelRef(OLD)) == {"a": ModelRef(OLD)}


def test_move_that_explicit_placement_nodes_forbid_is_refused_not_fought() -> None:
    slots = {"a": slot(OLD), "b": slot(OLD), "c": empty()}
    out = move(st.PlanState(), slots, 0, nodes=["c"], replicas=["a", "b"], allowed=["a", "b"])
    assert out.state.phase == swp.SwapPhase.FAILED
    assert out.actions == ()
    assert "spec.placement.nodes" in (out.state.message or "")
    assert "c" in (out.state.message or "")
    fine = move(st.PlanState(), slots, 0, nodes=["c"], replicas=["a", "b"], allowed=["a", "c"])
    assert fine.actions == (st.PutTarget("c"),)


def test_paused_plan_with_nothing_to_do_stays_paused_until_approved() -> None:
    """The sample plan: paused; a node without a replica and a node that does not exist."""
    slots = {"a": empty()}
    out = progress.advance(
        st.PlanState(), target=TARGET, nodes=["a", "ghost"], paused=True, slots=slots, now=at(0),
        replicas=[], known=["a"],
    )  # fmt: skip
    assert out.state.phase == swp.SwapPhase.PAUSED
    assert out.actions == ()
    assert [s.phase for s in out.state.steps] == ["Skipped", "Skipped"]
    assert "no InferenceNode named ghost" in (out.state.steps[1].message or "")
    again = progress.advance(
        out.state, target=TARGET, nodes=["a", "ghost"], paused=True, slots=slots, now=at(5),
        replicas=[], known=["a"],
    )  # fmt: skip
    assert again.state.phase == swp.SwapPhase.PAUSED
    approved = progress.advance(
        again.state, target=TARGET, nodes=["a", "ghost"], paused=False, slots=slots, now=at(9),
        replicas=[], known=["a"],
    )  # fmt: skip
    assert approved.state.phase == swp.SwapPhase.FAILED
    assert approved.state.reason == "NothingToDo"
    assert approved.state.progress == "0/2"
    assert approved.state.completed_at == at(9)
    assert "ghost" in (approved.state.message or "")


def test_step_for_an_unknown_node_is_skipped_with_a_reason_and_the_rest_runs() -> None:
    slots = {"a": slot(), "b": slot()}
    out = progress.advance(
        st.PlanState(), target=TARGET, nodes=["ghost", "a"], paused=False, slots=slots,
        now=at(0), known=["a", "b"],
    )  # fmt: skip
    assert [s.phase for s in out.state.steps] == ["Skipped", "Loading"]
    assert out.state.steps[0].message == "no InferenceNode named ghost"
    assert out.actions == (st.PutTarget("a"),)
    done = progress.advance(
        out.state, target=TARGET, nodes=["ghost", "a"], paused=False,
        slots={"a": slot(NEW, record(1, contract.SwapOutcome.COMPLETED))}, now=at(5),
        known=["a", "b"],
    )  # fmt: skip
    assert done.state.phase == swp.SwapPhase.COMPLETED
    assert done.state.progress == "1/2"


def test_node_deleted_before_its_step_is_skipped() -> None:
    state = step(st.PlanState(), {"a": slot(), "b": slot()}, 0).state
    out = progress.advance(
        state, target=TARGET, nodes=["a", "b"], paused=False,
        slots={"a": slot(NEW, record(1, contract.SwapOutcome.COMPLETED))}, now=at(5),
        known=["a"],
    )  # fmt: skip
    assert [s.phase for s in out.state.steps] == ["Completed", "Skipped"]
    assert out.state.phase == swp.SwapPhase.COMPLETED
    assert out.actions == ()


def test_a_plan_whose_steps_all_had_nothing_to_do_is_not_completed() -> None:
    out = progress.advance(
        st.PlanState(), target=TARGET, nodes=["a", "b"], paused=False,
        slots={"a": empty(), "b": empty()}, now=at(0),
    )  # fmt: skip
    assert out.state.phase == swp.SwapPhase.FAILED
    assert out.state.reason == "NothingToDo"
    assert [s.phase for s in out.state.steps] == ["Skipped", "Skipped"]
    assert all(s.message == "no replica on this node" for s in out.state.steps)


def test_nodes_already_on_target_complete_the_plan() -> None:
    """Nothing to change because the target already holds: that is Completed, not a failure."""
    out = step(st.PlanState(), {"a": slot(NEW), "b": slot(NEW)}, 0)
    assert out.state.phase == swp.SwapPhase.COMPLETED
    assert [s.message for s in out.state.steps] == ["already on target"] * 2
    assert out.state.reason is None

"""A SwapPlan step finds its agent swap by the id it sent, whatever the agent's clock says, and
its timeline is on the operator's clock (scenario 8 of the fault suite, as pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as hs

from mlxfleet_agent import contract
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import clocks
from mlxfleet_operator.core.swapplan import progress
from mlxfleet_operator.core.swapplan import state as st

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OLD = "file:///models/a"
NEW = "file:///models/b"
PLAN = "0b6c1a52-6a8e-4c55-9d5e-2f1f3f1b7c11"
DAY = 86_400.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def swap(
    request_id: str | None,
    times: list[float],
    skew: timedelta,
    *,
    to: str = NEW,
    served: int = 10,
) -> contract.SwapRecord:
    """A completed swap record written by an agent whose clock is `skew` ahead (times: when
    it started, was warm, switched, finished, on the operator's clock)."""
    start, warm, switched, finished = (at(t) + skew for t in times)
    return contract.SwapRecord(
        id=f"r{served}",
        slot="slot",
        request_id=request_id,
        requested_strategy=contract.SwapStrategy.AUTO,
        strategy=contract.SwapStrategy.SURGE,
        from_source=OLD if to == NEW else NEW,
        to_source=to,
        started_at=start,
        new_ready_at=warm,
        switched_at=switched,
        old_drained_at=finished,
        finished_at=finished,
        outcome=contract.SwapOutcome.COMPLETED,
        requests_served=served,
    )


def node(
    model: str, *swaps: contract.SwapRecord, offset: timedelta | None = timedelta(0)
) -> st.NodeSlot:
    return st.NodeSlot(
        reachable=True, model=ModelRef(model), ready=True, swaps=swaps, offset=offset
    )


def advance(state: st.PlanState, slot: st.NodeSlot, now: float) -> st.Advance:
    return progress.advance(
        state, target=ModelRef(NEW), nodes=["a"], paused=False, slots={"a": slot}, now=at(now)
    )


def test_offset_is_the_agent_clock_against_the_middle_of_the_round_trip() -> None:
    sent, trip = at(0), timedelta(milliseconds=40)
    agent_now = at(0.02) - timedelta(minutes=5)
    assert clocks.offset(agent_now, sent, trip) == -timedelta(minutes=5)
    assert clocks.offset(None, sent, trip) is None  # an agent too old to report its clock


def test_a_step_sends_an_id_that_any_operator_derives_the_same() -> None:
    first = advance(st.PlanState(plan_id=PLAN), node(OLD), 0)
    [put] = first.actions
    assert isinstance(put, st.PutTarget)
    assert put.request_id == f"{PLAN}.0" == first.state.steps[0].request_id
    # a new leader that never saw the status write starts the step again with the same id
    again = advance(st.PlanState(plan_id=PLAN), node(OLD), 30)
    assert again.actions[0].request_id == put.request_id
    # one that did see it re-sends the step's id while the agent shows no record
    waiting = advance(first.state, node(OLD), 5)
    assert waiting.actions[0].request_id == put.request_id


@settings(max_examples=300, deadline=None)
@given(
    skew_s=hs.floats(min_value=-DAY, max_value=DAY, allow_nan=False),
    error_ms=hs.integers(min_value=-200, max_value=200),
    gaps=hs.lists(hs.floats(min_value=0.0, max_value=120.0), min_size=4, max_size=4),
    decoy_s=hs.floats(min_value=-600.0, max_value=600.0),
)
def test_any_clock_offset_gives_the_same_record_and_a_monotone_timeline(
    skew_s: float, error_ms: int, gaps: list[float], decoy_s: float
) -> None:
    """The agent's clock is anything within a day of the operator's, the measured offset is off
    by up to 200 ms (half a round trip); another plan's swap to the same model on the same slot
    started anywhere within 10 minutes of ours. The step takes its own record, every time on the
    operator's clock, in order, inside the step."""
    skew = timedelta(seconds=skew_s)
    started = advance(st.PlanState(plan_id=PLAN), node(OLD), 0)
    [put] = started.actions
    t = [gaps[0]]
    for gap in gaps[1:]:
        t.append(t[-1] + gap)
    mine = swap(put.request_id, t, skew, served=7)
    decoy_times = [decoy_s, decoy_s + 1, decoy_s + 2, decoy_s + 3]
    decoy = swap("another-plan.0", decoy_times, skew, served=99)
    newest_first = sorted([mine, decoy], key=lambda r: r.started_at, reverse=True)
    now = t[-1] + 1
    measured = skew + timedelta(milliseconds=error_ms)
    done = advance(started.state, node(NEW, *newest_first, offset=measured), now)

    [s] = done.state.steps
    assert s.phase == swp.StepPhase.COMPLETED
    assert s.requests_served == 7  # its own record, not the other plan's
    assert done.state.phase == swp.SwapPhase.COMPLETED
    timeline = [x for x in (s.started_at, s.warm_at, s.switched_at, s.finished_at) if x]
    assert len(timeline) == 4
    assert timeline == sorted(timeline)
    assert at(0) <= timeline[0]
    assert timeline[-1] <= at(now)
    slack = timedelta(milliseconds=abs(error_ms))
    for got, real in zip(timeline[1:], t[1:], strict=True):
        assert abs(got - at(real)) <= slack


def test_a_revert_finds_its_record_by_id_on_a_skewed_agent() -> None:
    """Rollback: the completed step's revert is its own swap back, matched by its id."""
    skew = -timedelta(minutes=5)
    two = st.PlanState(plan_id=PLAN)
    slots = {"a": node(OLD, offset=skew), "b": node(OLD, offset=skew)}

    def go(state: st.PlanState, now: float) -> st.Advance:
        return progress.advance(
            state, target=ModelRef(NEW), nodes=["a", "b"], paused=False, slots=slots, now=at(now)
        )

    a_started = go(two, 0)
    slots["a"] = node(NEW, swap(f"{PLAN}.0", [1, 2, 3, 4], skew), offset=skew)
    b_started = go(a_started.state, 5)
    assert b_started.actions[0].request_id == f"{PLAN}.1"
    failed_b = swap(f"{PLAN}.1", [6, 7, 8, 9], skew).model_copy(
        update={"outcome": contract.SwapOutcome.ROLLED_BACK, "reason": "oom"}
    )
    slots["b"] = node(OLD, failed_b, offset=skew)
    rolling = go(b_started.state, 10)
    assert rolling.state.phase == swp.SwapPhase.ROLLING_BACK
    revert = next(a for a in rolling.actions if not isinstance(a, st.PutGroup) and a.node == "a")
    assert revert.request_id == f"{PLAN}.0.revert"
    back = swap(f"{PLAN}.0.revert", [11, 12, 13, 14], skew, to=OLD, served=3)
    slots["a"] = node(OLD, back, slots["a"].swaps[0], offset=skew)
    done = go(rolling.state, 15)
    assert done.state.phase == swp.SwapPhase.ROLLED_BACK
    a = done.state.steps[0]
    assert a.phase == swp.StepPhase.REVERTED
    assert a.revert is not None
    assert a.revert.requests_served == 3
    assert a.revert.started_at == at(10)
    assert a.revert.finished_at == at(14)


def test_without_ids_the_record_is_matched_by_time_on_the_operator_clock() -> None:
    """A step an older operator started (no id in its status) on a skewed agent: the fallback
    compares start times after putting the agent's on the operator's clock."""
    skew = -timedelta(minutes=5)
    started = advance(st.PlanState(plan_id=PLAN), node(OLD, offset=skew), 0)
    legacy = st.PlanState(
        phase=started.state.phase,
        steps=(started.state.steps[0].model_copy(update={"request_id": None}),),
        plan_id=PLAN,
    )
    done = advance(legacy, node(NEW, swap(None, [1, 2, 3, 4], skew), offset=skew), 5)
    [s] = done.state.steps
    assert s.phase == swp.StepPhase.COMPLETED
    assert s.finished_at == at(4)
    # an agent that echoes ids never lends a step someone else's record
    other = swap("another-plan.0", [1, 2, 3, 4], skew)
    waiting = advance(started.state, node(NEW, other, offset=skew), 5)
    assert waiting.state.steps[0].phase == swp.StepPhase.LOADING

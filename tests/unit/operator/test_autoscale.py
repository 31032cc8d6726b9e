"""The autoscaler's decisions (core.deployment.autoscale): start, sleep after idleTimeout, wake on
demand, follow the load with stabilisation windows (no flapping: property-tested), resume from
status; the load as agents and gateways report it; who is asked to wake."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import autoscale as a
from mlxfleet_operator.core.deployment import status as mdstatus
from tests.unit.operator import builders

NOW = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)
WINDOWS = a.Windows(up=5 * S, down=60 * S)
SLEEPY = a.Bounds(start=1, low=0, high=3, capacity=4, idle_timeout=15 * S)
R = mdep.ScaleReason


def step(bounds: a.Bounds, load: a.Load, last: a.Scale | None, at: float) -> a.Scale:
    return a.decide(bounds, load, last, now=NOW + at * S, windows=WINDOWS)


def test_a_new_deployment_starts_at_spec_replicas_clamped() -> None:
    first = step(a.Bounds(start=2, low=0, high=3, capacity=4), a.Load(), None, 0)
    assert (first.desired, first.reason, first.base) == (2, R.START, 2)
    assert step(a.Bounds(start=1, low=2, high=3, capacity=4), a.Load(), None, 0).desired == 2


def test_spec_replicas_zero_is_off_and_never_woken() -> None:
    off = a.Bounds(start=0, low=0, high=3, capacity=4, idle_timeout=15 * S)
    scale = step(off, a.Load(waiting=5), None, 0)
    assert scale.desired == 0
    assert step(off, a.Load(waiting=5), scale, 1).desired == 0


def test_it_sleeps_after_idle_timeout_and_not_before() -> None:
    start = step(SLEEPY, a.Load(), None, 0)
    early = step(SLEEPY, a.Load(idle_for=14 * S), start, 14)
    assert early.desired == 1
    asleep = step(SLEEPY, a.Load(idle_for=15 * S), early, 15)
    assert (asleep.desired, asleep.reason) == (0, R.IDLE)
    assert asleep.changed_at == NOW + 15 * S
    assert "no requests for 15s" in asleep.message
    assert "sleeping" in asleep.message


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(a.Load(busy=1, idle_for=0 * S), id="a request in flight"),
        pytest.param(a.Load(waiting=1, idle_for=99 * S), id="a request held at a gateway"),
        pytest.param(a.Load(idle_for=None), id="no replica reports (loading or lost)"),
    ],
)
def test_it_never_sleeps_while_a_request_is_there_or_idleness_is_unknown(load: a.Load) -> None:
    start = step(SLEEPY, a.Load(), None, 0)
    assert step(SLEEPY, load, start, 100).desired == 1


def test_a_held_request_wakes_it_at_the_start_count() -> None:
    bounds = a.Bounds(start=2, low=0, high=3, capacity=4, idle_timeout=15 * S)
    asleep = step(bounds, a.Load(idle_for=20 * S), step(bounds, a.Load(), None, 0), 20)
    assert asleep.desired == 0
    assert step(bounds, a.Load(), asleep, 30).desired == 0  # nobody asks: it sleeps on
    woken = step(bounds, a.Load(waiting=3), asleep, 40)
    assert (woken.desired, woken.reason) == (2, R.DEMAND)
    assert "3 requests wait" in woken.message


def test_min_replicas_above_zero_scales_down_to_it_when_idle() -> None:
    bounds = a.Bounds(start=3, low=1, high=3, capacity=4, idle_timeout=10 * S)
    start = step(bounds, a.Load(), None, 0)
    assert step(bounds, a.Load(idle_for=10 * S), start, 10).desired == 1


def test_a_change_of_spec_replicas_starts_again_from_it() -> None:
    bounds = a.Bounds(start=1, low=1, high=4, capacity=4)
    up = step(bounds, a.Load(busy=16), step(bounds, a.Load(), None, 0), 10)
    assert up.desired == 4
    moved = step(a.Bounds(start=2, low=1, high=4, capacity=4), a.Load(busy=16), up, 11)
    assert (moved.desired, moved.reason, moved.base) == (2, R.START, 2)


def test_load_scales_up_after_the_up_window_and_down_after_the_down_window() -> None:
    bounds = a.Bounds(start=1, low=1, high=3, capacity=4)
    scale = step(bounds, a.Load(), None, 0)
    scale = step(bounds, a.Load(busy=12), scale, 1)
    assert scale.desired == 1  # the window still holds the 1 of t=0
    scale = step(bounds, a.Load(busy=12), scale, 6)
    assert (scale.desired, scale.reason) == (3, R.LOAD)
    assert "12 requests in flight or queued, 4 per replica" in scale.message
    for t in range(7, 66, 5):
        scale = step(bounds, a.Load(), scale, t)
    assert scale.desired == 3  # the 3 of t=6 is still within the 60 s down window
    scale = step(bounds, a.Load(), scale, 67)
    assert (scale.desired, scale.reason) == (1, R.LOAD)


def test_load_alone_never_sleeps_and_never_goes_past_max() -> None:
    bounds = a.Bounds(start=1, low=0, high=2, capacity=4, idle_timeout=None)
    assert a.recommend(bounds, a.Load()) == 1
    assert a.recommend(bounds, a.Load(busy=400)) == 2


def test_resume_reads_the_decision_back_from_status() -> None:
    scale = step(SLEEPY, a.Load(idle_for=15 * S), step(SLEEPY, a.Load(), None, 0), 15)
    md = a.attach(builders.md(replicas=1, minReplicas=0, idleTimeout="15s"), scale)
    back = a.resume(md.status)
    assert back is not None
    assert (back.desired, back.reason, back.changed_at, back.base) == (
        0,
        R.IDLE,
        scale.changed_at,
        1,
    )
    assert a.resume(mdep.ModelDeploymentStatus()) is None


def test_wanted_is_the_decision_only_for_autoscaled_deployments() -> None:
    scale = a.Scale(0, R.IDLE, "idle", NOW, 1)
    assert a.wanted(a.attach(builders.md(replicas=1, minReplicas=0, idleTimeout="15s"), scale)) == 0
    plain = builders.md(replicas=2)
    assert a.attach(plain, scale) is plain
    assert a.wanted(plain) == 2


def test_a_sleeping_deployment_is_ready_with_reason_sleeping() -> None:
    scale = step(SLEEPY, a.Load(idle_for=15 * S), step(SLEEPY, a.Load(), None, 0), 15)
    md = a.attach(builders.md(replicas=1, minReplicas=0, idleTimeout="15s"), scale)
    verdict = mdstatus._zero(md)
    assert verdict.ready
    assert verdict.reason == cond.Reason.SLEEPING
    assert "the next request through the gateway wakes it" in verdict.message
    off = builders.md(replicas=0)
    assert mdstatus._zero(off).reason == cond.Reason.SCALED_TO_ZERO


def _slot(
    *, ready: bool = True, in_flight: int = 0, queued: int = 0, idle: float | None = 0.0
) -> contract.SlotStatus:
    return contract.SlotStatus(
        name="ns-chat",
        served_name="chat",
        source="file:///m",
        phase=contract.SlotPhase.READY if ready else contract.SlotPhase.LOADING,
        ready=ready,
        in_flight=in_flight,
        queued=queued,
        idle_seconds=idle,
    )


def test_load_of_sums_the_agents_and_the_fresh_gateway_demand() -> None:
    replicas = [
        a.Observed(_slot(in_flight=4, queued=3, idle=0.0), NOW),
        a.Observed(_slot(idle=30.0), NOW - 2 * S),
        a.Observed(_slot(ready=False, idle=None), NOW),
    ]
    wants = [
        a.Want("gw-1", 2, NOW, renewed=NOW - 5 * S),
        a.Want("gw-2", 9, NOW, renewed=NOW - 60 * S),  # a gateway that died: ignored
    ]
    load = a.load_of(replicas, wants, now=NOW)
    assert (load.busy, load.waiting, load.idle_for) == (7, 2, 0 * S)
    idle = a.load_of([a.Observed(_slot(idle=30.0), NOW - 2 * S)], [], now=NOW)
    assert idle.idle_for == 32 * S
    assert a.load_of([a.Observed(_slot(ready=False, idle=None), NOW)], [], now=NOW).idle_for is None


def test_to_wake_asks_once_per_demand_and_only_for_deployments_without_a_ready_replica() -> None:
    wants = {
        ("ns", "asleep"): a.Want("gw", 1, NOW, NOW),
        ("ns", "serving"): a.Want("gw", 1, NOW, NOW),
        ("ns", "stale"): a.Want("gw", 1, NOW, NOW - 60 * S),
        ("ns", "none"): a.Want("gw", 0, NOW, NOW),
    }
    ready = {("ns", "serving"): 1}
    due = a.to_wake(wants, ready=lambda k: ready.get(k, 0), told={}, now=NOW)
    assert due == [(("ns", "asleep"), NOW)]
    told = {("ns", "asleep"): NOW}
    assert a.to_wake(wants, ready=lambda k: ready.get(k, 0), told=told, now=NOW) == []


def test_scaled_events_name_the_change() -> None:
    scale = a.Scale(3, R.LOAD, "12 requests in flight or queued, 4 per replica", NOW, 1)
    event = a.scaled_event(1, scale)
    assert event is not None
    assert event.reason == "Scaled"
    assert event.message.startswith("1 -> 3 replicas")
    assert a.scaled_event(3, scale) is None
    asleep = a.scaled_event(1, a.Scale(0, R.IDLE, "idle", NOW, 1))
    woken = a.scaled_event(0, a.Scale(1, R.DEMAND, "woken", NOW, 1))
    assert asleep is not None
    assert asleep.reason == "Sleeping"
    assert woken is not None
    assert woken.reason == "Woken"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=80),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=8),
)
def test_the_count_stays_in_bounds_and_never_reverses_within_a_window(
    loads: list[int], capacity: int, high: int
) -> None:
    """Whatever the load does (sampled every second), the count stays within max(min, 1) and
    max, and after any change it never moves the other way within the window that guards that
    direction: a scale-down only after `down` seconds without a higher recommendation, so a
    burst never makes it flap."""
    bounds = a.Bounds(start=1, low=1, high=high, capacity=capacity)
    scale = step(bounds, a.Load(), None, 0)
    changes: list[tuple[float, int]] = []
    for t, busy in enumerate(loads, start=1):
        before = scale.desired
        scale = step(bounds, a.Load(busy=busy), scale, t)
        assert 1 <= scale.desired <= high
        if scale.desired != before:
            changes.append((t, scale.desired - before))
    for (t0, d0), (t1, d1) in itertools.pairwise(changes):
        if d0 > 0 and d1 < 0:
            assert t1 - t0 >= WINDOWS.down.total_seconds()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), min_size=1, max_size=60))
def test_it_sleeps_only_when_idle_for_the_timeout_with_nothing_waiting(
    events: list[tuple[int, int]],
) -> None:
    scale = step(SLEEPY, a.Load(), None, 0)
    for t, (waiting, idle) in enumerate(events, start=1):
        load = a.Load(waiting=waiting, idle_for=idle * S)
        before = scale.desired
        scale = step(SLEEPY, load, scale, t)
        if scale.desired == 0 and before != 0:
            assert waiting == 0
            assert idle >= 15
        if before == 0 and waiting:
            assert scale.desired == 1


def test_the_wake_annotation_is_one_kopf_compares() -> None:
    """The wake annotation must change what kopf compares (its essence): kopf leaves every
    annotation under its own prefix out, and a wake written there ran no handler (the deployment
    woke only at its next timer tick)."""
    import kopf

    from mlxfleet_operator.api import resources

    storage = kopf.AnnotationsProgressStorage(prefix=resources.ANNOTATION_PREFIX)
    essence = {"metadata": {"annotations": {resources.WAKE_ANNOTATION: "t"}}, "spec": {}}
    kept = storage.clear(essence=essence)  # type: ignore[arg-type]
    assert kept["metadata"]["annotations"] == {resources.WAKE_ANNOTATION: "t"}

"""Conditions: transition time moves only on a flip; kstatus trio from one verdict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mlxfleet_operator.api import conditions as api
from mlxfleet_operator.core.kit import conditions, events

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(minutes=1)


def test_transition_time_changes_only_on_flip() -> None:
    first = conditions.set_condition(
        [], kind="Ready", status=False, reason="Loading", message="m", generation=1, now=T0
    )
    same = conditions.set_condition(
        first,
        kind="Ready",
        status=False,
        reason="WaitingForCapacity",
        message="other",
        generation=2,
        now=T1,
    )
    assert same[0].last_transition_time == T0
    assert (same[0].reason, same[0].observed_generation) == ("WaitingForCapacity", 2)
    flipped = conditions.set_condition(
        same, kind="Ready", status=True, reason="Ready", message="", generation=2, now=T1
    )
    assert flipped[0].last_transition_time == T1


def test_verdict_sets_kstatus_trio() -> None:
    out = conditions.apply_verdict(
        [],
        conditions.Verdict(
            False, api.Reason.INSUFFICIENT_MEMORY, "too big", reconciling=True, stalled=True
        ),
        generation=3,
        now=T0,
    )
    by = {c.type: c for c in out}
    assert by["Ready"].status is api.ConditionStatus.FALSE
    assert by["Stalled"].status is api.ConditionStatus.TRUE
    assert by["Reconciling"].status is api.ConditionStatus.FALSE  # never both
    assert by["Stalled"].message == "too big"
    ok = conditions.apply_verdict(
        out, conditions.Verdict(True, api.Reason.READY, "2/2"), generation=3, now=T1
    )
    by = {c.type: c for c in ok}
    assert by["Ready"].status is api.ConditionStatus.TRUE
    assert by["Reconciling"].last_transition_time == T0  # stayed False
    assert by["Stalled"].last_transition_time == T1
    assert [c.type for c in ok] == ["Ready", "Reconciling", "Stalled"]


def test_a_change_of_ready_is_an_event_once() -> None:
    """ModelDeployments emitted no Events (issue 28 item 9): a change of Ready's status or
    reason is one, a Warning when the object is Stalled; the same verdict again is none."""
    loading = conditions.Verdict(False, "Loading", "0/2 replicas ready", reconciling=True)
    ready = conditions.Verdict(True, "Ready", "2/2 replicas ready")
    stuck = conditions.Verdict(False, "WaitingForCapacity", "2/3 ready, 1 unplaced", stalled=True)
    first = conditions.apply_verdict([], loading, generation=1, now=T0)
    event = conditions.ready_changed([], first)
    assert event is not None
    assert (event.reason, event.message, event.type) == ("Loading", "0/2 replicas ready", "Normal")
    assert conditions.ready_changed(first, first) is None
    served = conditions.apply_verdict(first, ready, generation=1, now=T0)
    assert conditions.ready_changed(first, served) == events.Event("Ready", "2/2 replicas ready")
    stalled = conditions.apply_verdict(served, stuck, generation=1, now=T0)
    warned = conditions.ready_changed(served, stalled)
    assert warned is not None
    assert (warned.reason, warned.type) == ("WaitingForCapacity", "Warning")

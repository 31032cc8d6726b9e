"""Leader election decisions (core.leadership), pure: given a Lease as seen, who we are and a
monotonic now: create, acquire, renew, wait or step down; the fencing margin; what is written."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxfleet_operator.core.kit import leadership as le

T = le.Timing(lease_duration=3, renew_deadline=2.0, retry_period=0.5)
WALL = datetime(2026, 1, 1, tzinfo=UTC)
V = le.Verdict


def held(by: str | None, *, duration: int = 3, transitions: int = 0) -> le.Record:
    return le.Record(holder=by, lease_duration=duration, renew_time=WALL, transitions=transitions)


def seen(record: le.Record, since: float = 100.0) -> le.Seen:
    return le.Seen(record=record, since=since)


@pytest.mark.parametrize(
    ("lease", "now", "renewed_at", "verdict"),
    [
        pytest.param(None, 100.0, None, V.CREATE, id="no-lease-create"),
        pytest.param(seen(held(None)), 100.0, None, V.ACQUIRE, id="released-acquire"),
        pytest.param(seen(held("other")), 100.0, None, V.WAIT, id="live-other-wait"),
        pytest.param(seen(held("other")), 102.99, None, V.WAIT, id="just-before-expiry-wait"),
        pytest.param(seen(held("other")), 103.0, None, V.ACQUIRE, id="expired-acquire"),
        pytest.param(
            seen(held("other", duration=15)), 110.0, None, V.WAIT, id="holder-duration-counts"
        ),
        pytest.param(seen(held("me")), 100.0, None, V.ACQUIRE, id="ours-from-before-acquire"),
        pytest.param(seen(held("me")), 101.0, 100.0, V.RENEW, id="leading-renew"),
        pytest.param(seen(held("me")), 101.99, 100.0, V.RENEW, id="before-deadline-renew"),
        pytest.param(seen(held("me")), 102.0, 100.0, V.STEP_DOWN, id="deadline-step-down"),
        pytest.param(seen(held("other")), 100.5, 100.0, V.STEP_DOWN, id="taken-over-step-down"),
        pytest.param(seen(held(None)), 100.5, 100.0, V.STEP_DOWN, id="cleared-step-down"),
        pytest.param(None, 100.5, 100.0, V.STEP_DOWN, id="deleted-step-down"),
    ],
)
def test_decide(
    lease: le.Seen | None, now: float, renewed_at: float | None, verdict: le.Verdict
) -> None:
    assert le.decide(me="me", seen=lease, now=now, renewed_at=renewed_at, timing=T) is verdict


def test_expiry_counts_from_when_the_record_was_first_seen_not_its_timestamps() -> None:
    """Clocks of other machines are never trusted: a renewTime years in the past (or future)
    changes nothing; only how long the same record stays unchanged by our clock counts."""
    old = le.Record(holder="other", lease_duration=3, renew_time=datetime(2000, 1, 1, tzinfo=UTC))
    first = le.observe(None, old, now=50.0)
    assert first is not None
    assert le.decide(me="me", seen=first, now=52.0, renewed_at=None, timing=T) is V.WAIT
    again = le.observe(first, old, now=52.9)
    assert again is first  # unchanged: the clock keeps running from 50
    assert le.decide(me="me", seen=again, now=53.0, renewed_at=None, timing=T) is V.ACQUIRE
    renewed = le.observe(again, le.renewed(old, wall=WALL), now=53.1)
    assert renewed is not None
    assert renewed.since == 53.1  # a renew restarts it
    assert le.decide(me="me", seen=renewed, now=55.0, renewed_at=None, timing=T) is V.WAIT
    assert le.observe(renewed, None, now=56.0) is None


@given(
    renewed_at=st.floats(0, 1e6),
    lag=st.floats(0, 10),
    delay=st.floats(0, 10),
    deadline=st.floats(0.1, 30),
    extra=st.integers(1, 30),
)
def test_a_leader_always_stops_before_a_standby_may_take_over(
    renewed_at: float, lag: float, delay: float, deadline: float, extra: int
) -> None:
    """Fencing: the leader's last successful renew started at `renewed_at`; the standby first
    saw that record `lag` later. Whenever the standby may acquire, the leader must stop."""
    duration = int(deadline) + extra
    timing = le.Timing(lease_duration=duration, renew_deadline=deadline, retry_period=deadline / 4)
    record = held("leader", duration=duration)
    view = le.Seen(record=record, since=renewed_at + lag)
    now = renewed_at + lag + delay
    standby = le.decide(me="standby", seen=view, now=now, renewed_at=None, timing=timing)
    leader = le.decide(me="leader", seen=view, now=now, renewed_at=renewed_at, timing=timing)
    if standby is V.ACQUIRE:
        assert leader is V.STEP_DOWN


def test_claim_counts_transitions_only_on_a_change_of_holder() -> None:
    fresh = le.claimed(None, me="a", wall=WALL, timing=T)
    assert fresh == le.Record("a", 3, WALL, WALL, 0)
    taken = le.claimed(held("b", transitions=4), me="a", wall=WALL, timing=T)
    assert (taken.holder, taken.transitions, taken.lease_duration) == ("a", 5, 3)
    again = le.claimed(held("a", transitions=4), me="a", wall=WALL, timing=T)
    assert again.transitions == 4
    after_release = le.claimed(held(None, transitions=4), me="a", wall=WALL, timing=T)
    assert after_release.transitions == 5


def test_renew_keeps_the_term_and_release_clears_the_holder() -> None:
    term = le.claimed(None, me="a", wall=WALL, timing=T)
    later = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    renewed = le.renewed(term, wall=later)
    assert (renewed.holder, renewed.acquire_time, renewed.renew_time) == ("a", WALL, later)
    gone = le.released(le.Record("a", 3, WALL, WALL, 7), wall=later)
    assert gone.free
    assert (gone.lease_duration, gone.transitions) == (1, 7)
    assert le.decide(me="b", seen=seen(gone), now=100.0, renewed_at=None, timing=T) is V.ACQUIRE


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        pytest.param({"lease_duration": 0}, "lease_duration", id="zero-lease"),
        pytest.param({"renew_deadline": 3.0}, "renew_deadline", id="deadline-not-below-lease"),
        pytest.param({"renew_deadline": 0.0}, "renew_deadline", id="zero-deadline"),
        pytest.param({"retry_period": 2.0}, "retry_period", id="retry-not-below-deadline"),
        pytest.param({"retry_period": -1.0}, "retry_period", id="negative-retry"),
    ],
)
def test_timing_refuses_an_order_that_breaks_fencing(kwargs: dict[str, float], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        le.Timing(**kwargs)  # type: ignore[arg-type]


def test_default_timing_meets_the_takeover_goals() -> None:
    """SIGKILL: at worst a lease duration after the last renew, seen one retry late, tried one
    retry late: <= 5 s. The margin between the leader stopping and a takeover is 1 s."""
    default = le.Timing()
    assert default.lease_duration + 2 * default.retry_period <= 5
    assert default.margin == 1.0

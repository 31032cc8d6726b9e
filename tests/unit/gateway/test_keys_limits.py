"""API keys from Secrets (errors name the field), authentication, and per-minute limits."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from mlxfleet_gateway.core import budget, errors, keys, limits

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def key(name: str = "app", **data: str) -> tuple[str, keys.ApiKey]:
    token = keys.new_key()
    spec = {"keyHash": keys.hash_key(token), "namespaces": "team-a,shared", **data}
    return token, keys.from_secret(name, spec)


def test_a_key_secret_parses() -> None:
    _, k = key(
        team="search",
        owner="al@x",
        models="chat,embed",
        requestsPerMinute="60",
        tokensPerMinute="1000",
        expiresAt="2027-01-01T00:00:00Z",
    )
    assert k.scope == ("team-a", "shared")
    assert k.may_use("chat")
    assert not k.may_use("other")
    assert (k.spec.requests_per_minute, k.spec.tokens_per_minute) == (60, 1000)
    assert k.spec.team == "search"
    _, anyone = key(models="*")
    assert anyone.may_use("whatever")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param({"keyHash": "abc", "namespaces": "a"}, "keyHash", id="short-hash"),
        pytest.param({"keyHash": "0" * 64}, "namespaces", id="no-namespaces"),
        pytest.param(
            {"keyHash": "0" * 64, "namespaces": "a", "requestsPerMinute": "lots"},
            "requestsPerMinute",
            id="rpm",
        ),
        pytest.param(
            {"keyHash": "0" * 64, "namespaces": "a", "expiresAt": "2027-01-01T00:00:00"},
            "expiresAt",
            id="naive-expiry",
        ),
    ],
)
def test_bad_secrets_are_refused_naming_the_secret_and_field(
    data: dict[str, str], field: str
) -> None:
    with pytest.raises(keys.InvalidKey) as info:
        keys.from_secret("bad-key", data)
    assert "bad-key" in str(info.value)
    assert field in str(info.value)


def test_authenticate_401_for_missing_unknown_and_expired() -> None:
    token, k = key()
    old_token, old = key("old", expiresAt="2026-01-01T00:00:00Z")
    ring = keys.KeyRing([k, old])
    assert ring.authenticate(token, now_utc=NOW) is k
    for bad, code in (
        (None, "invalid_api_key"),
        ("mfk-nope", "invalid_api_key"),
        (old_token, "key_expired"),
    ):
        with pytest.raises(errors.GatewayError) as info:
            ring.authenticate(bad, now_utc=NOW)
        assert (info.value.status, info.value.code) == (401, code)


def test_requests_per_minute_is_an_exact_sliding_window() -> None:
    _, k = key(requestsPerMinute="3")
    lim = limits.Limits()
    for t in (0.0, 10.0, 20.0):
        lim.admit(k, now=t, estimate=0)
    with pytest.raises(errors.GatewayError) as info:
        lim.admit(k, now=30.0, estimate=0)
    assert info.value.status == 429
    assert dict(info.value.headers)[b"retry-after"] == b"30"  # the request at 0 leaves at 60
    lim.admit(k, now=60.5, estimate=0)
    with pytest.raises(errors.GatewayError):
        lim.admit(k, now=61.0, estimate=0)


def test_tokens_per_minute_counts_use_and_reservations() -> None:
    _, k = key(tokensPerMinute="100")
    lim = limits.Limits()
    t1 = lim.admit(k, now=0.0, estimate=40)
    t2 = lim.admit(k, now=1.0, estimate=40)
    lim.settle(t1, now=2.0, tokens=70)
    with pytest.raises(errors.GatewayError) as info:  # 70 used + 40 reserved >= 100
        lim.admit(k, now=3.0, estimate=10)
    assert info.value.code == "tokens_per_minute"
    lim.settle(t2, now=4.0, tokens=20)  # 90 used
    t3 = lim.admit(k, now=5.0, estimate=10)
    lim.settle(t3, now=6.0, tokens=15)  # 105 used: over, the next one waits
    with pytest.raises(errors.GatewayError) as info:
        lim.admit(k, now=7.0, estimate=1)
    assert dict(info.value.headers)[b"retry-after"] == b"55"  # the 70 at t=2 leave at 62
    lim.admit(k, now=62.5, estimate=1)


def admitted(lim: limits.Limits, k: keys.ApiKey, *, now: float, estimate: int) -> bool:
    try:
        lim.settle(lim.admit(k, now=now, estimate=estimate), now=now, tokens=73)
    except errors.GatewayError:
        return False
    return True


def test_a_negative_estimate_in_flight_buys_no_tokens() -> None:
    """The attack: one request reserving -1e12 queued at a busy agent, then 20 ordinary ones
    (estimate 63) queued behind it on a key allowed 100 tokens a minute: two get in, as without
    the first one; all 20 did."""
    _, k = key(tokensPerMinute="100")
    lim = limits.Limits()
    lim.admit(k, now=0.0, estimate=-1_000_000_000_000)
    tickets = []
    for i in range(20):
        with contextlib.suppress(errors.GatewayError):
            tickets.append(lim.admit(k, now=1.0 + i, estimate=63))
    assert len(tickets) == 2


def test_overlapping_negative_estimates_do_not_lock_the_key_out() -> None:
    """The attack: 6 overlapping requests reserving -1e12 each, all refused upstream (0 tokens):
    the key must not be left with a phantom reservation of 5e12."""
    _, k = key(tokensPerMinute="1000000")
    lim = limits.Limits()
    tickets = [lim.admit(k, now=0.0, estimate=-1_000_000_000_000) for _ in range(6)]
    for t in tickets:
        lim.settle(t, now=0.5, tokens=0)
    assert lim._windows["app"].reserved == 0
    assert admitted(lim, k, now=1.0, estimate=60)


def test_a_ticket_settled_twice_gives_its_reservation_back_once() -> None:
    _, k = key(tokensPerMinute="1000")
    lim = limits.Limits()
    first = lim.admit(k, now=0.0, estimate=300)
    second = lim.admit(k, now=0.0, estimate=500)
    lim.settle(first, now=1.0, tokens=100)
    lim.settle(first, now=1.0, tokens=100)  # must not eat into `second`'s reservation
    w = lim._windows["app"]
    assert (w.reserved, w.token_sum) == (500, 100)
    lim.settle(second, now=2.0, tokens=0)
    assert w.reserved == 0


def test_a_reservation_outlives_the_window_sliding_past_it() -> None:
    """A request admitted at 0 that ends at 130 (the window slid past its admission): it gives
    back exactly its reservation, and what it used counts from when it ended."""
    _, k = key(tokensPerMinute="100")
    lim = limits.Limits()
    long = lim.admit(k, now=0.0, estimate=50)
    lim.settle(lim.admit(k, now=1.0, estimate=10), now=2.0, tokens=60)
    with pytest.raises(errors.GatewayError):  # 60 used + 50 reserved
        lim.admit(k, now=3.0, estimate=1)
    short = lim.admit(k, now=62.5, estimate=10)  # the 60 left at 62
    lim.settle(long, now=130.0, tokens=90)
    w = lim._windows["app"]
    assert w.reserved == 10
    with pytest.raises(errors.GatewayError):  # 90 used at 130 + 10 reserved
        lim.admit(k, now=140.0, estimate=1)
    lim.settle(short, now=141.0, tokens=0)
    assert w.reserved == 0
    lim.admit(k, now=150.0, estimate=1)


@settings(max_examples=200, deadline=None)
@given(
    hs.lists(
        hs.tuples(
            hs.integers(-(10**12), 10**6),  # an estimate (negative: what the attack sent)
            hs.integers(0, 10**6),  # the tokens it used
            hs.integers(0, 50),  # which open ticket ends next
            hs.booleans(),  # admit (True) or settle
        ),
        max_size=60,
    )
)
def test_reserved_is_always_the_sum_of_the_open_reservations(
    steps: list[tuple[int, int, int, bool]],
) -> None:
    """Any overlap of admits and settles, any estimates, a window sliding under them: the window
    holds exactly the open tickets' reservations, never below 0, and none once all are settled."""
    _, k = key(tokensPerMinute="10000000")
    lim = limits.Limits()
    open_: list[limits.Ticket] = []
    now = 0.0
    for estimate, tokens, pick, admit in steps:
        now += 7.0
        if admit or not open_:
            try:
                ticket = lim.admit(k, now=now, estimate=estimate)
            except errors.GatewayError:
                continue
            assert ticket.reserved >= 0
            open_.append(ticket)
        else:
            lim.settle(open_.pop(pick % len(open_)), now=now, tokens=tokens)
        assert lim._windows["app"].reserved == sum(t.reserved for t in open_)
    for ticket in open_:
        lim.settle(ticket, now=now, tokens=0)
    if "app" in lim._windows:
        assert lim._windows["app"].reserved == 0


def test_limits_are_shared_among_gateway_replicas() -> None:
    _, k = key(requestsPerMinute="10")
    lim = limits.Limits(share=2)
    for t in range(5):
        lim.admit(k, now=float(t), estimate=0)
    with pytest.raises(errors.GatewayError):
        lim.admit(k, now=5.0, estimate=0)


def test_usage_is_how_full_each_limit_is_in_this_replica() -> None:
    """What `mlxfleet_gateway_key_limit_usage_ratio` shows (MlxfleetApiKeyNearLimit)."""
    _, k = key(requestsPerMinute="20", tokensPerMinute="1000")
    lim = limits.Limits(share=2)  # this replica enforces 10 requests and 500 tokens a minute
    assert lim.usage(k, now=0.0) == {"requests_per_minute": 0.0, "tokens_per_minute": 0.0}
    tickets = [lim.admit(k, now=float(t), estimate=50) for t in range(9)]
    lim.settle(tickets[0], now=9.0, tokens=100)
    used = lim.usage(k, now=10.0)
    assert used["requests_per_minute"] == pytest.approx(0.9)
    assert used["tokens_per_minute"] == pytest.approx((100 + 8 * 50) / 500)  # use + reservations
    assert lim.usage(k, now=200.0)["requests_per_minute"] == 0.0  # the window slid past them
    _, open_key = key()
    assert lim.usage(open_key, now=0.0) == {}


def test_the_key_gauges_show_usage_and_expiry_at_scrape_time() -> None:
    from mlxfleet_gateway import metrics

    gauges = metrics.GatewayMetrics()
    facts = [metrics.KeyFacts(key="ci", usage={"requests_per_minute": 0.95}, expires_at=1e9)]
    gauges.watch_keys(lambda: facts)
    text = gauges.exposition().decode()
    assert (
        'mlxfleet_gateway_key_limit_usage_ratio{key="ci",limit="requests_per_minute"} 0.95' in text
    )
    assert 'mlxfleet_gateway_key_expiry_timestamp_seconds{key="ci"} 1e+09' in text
    facts.clear()  # a key deleted: its series go with it
    assert 'key="ci"' not in gauges.exposition().decode()


def test_keys_without_limits_are_not_tracked() -> None:
    _, k = key()
    lim = limits.Limits()
    for t in range(1000):
        lim.admit(k, now=float(t) / 100, estimate=10)
    assert lim._windows == {}


def test_retry_budget_allows_a_share_of_requests_plus_a_trickle() -> None:
    b = budget.RetryBudget(ratio=0.2, min_per_s=1.0, now=0.0)
    spent = sum(b.withdraw(now=0.0) for _ in range(100))
    assert spent == 10  # the initial reserve
    assert not b.withdraw(now=0.0)
    for _ in range(50):
        b.deposit(now=0.0)
    assert sum(b.withdraw(now=0.0) for _ in range(100)) == 10  # 20% of 50 requests
    assert b.withdraw(now=1.0)  # the trickle: min_per_s

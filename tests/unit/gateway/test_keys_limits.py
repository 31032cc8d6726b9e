"""API keys from Secrets (errors name the field), authentication, and per-minute limits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

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


def test_limits_are_shared_among_gateway_replicas() -> None:
    _, k = key(requestsPerMinute="10")
    lim = limits.Limits(share=2)
    for t in range(5):
        lim.admit(k, now=float(t), estimate=0)
    with pytest.raises(errors.GatewayError):
        lim.admit(k, now=5.0, estimate=0)


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

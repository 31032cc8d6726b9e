"""Balancer: least outstanding with two choices, prefix affinity with bounded load, ejection."""

from __future__ import annotations

import random
from collections import Counter

from mlxfleet_gateway.core import balancer

A = balancer.Candidate("ns/chat@a", "http://a:1", 4)
B = balancer.Candidate("ns/chat@b", "http://b:1", 4)
C = balancer.Candidate("ns/chat@c", "http://c:1", 4)
A2 = balancer.Candidate("ns/other@a", "http://a:1", 4)


def rng(seed: int = 1) -> random.Random:
    return random.Random(seed)


def test_two_choices_never_pick_the_busier_of_two() -> None:
    bal = balancer.Balancer()
    for _ in range(5):
        bal.started(A)
    r = rng()
    picks = Counter(bal.pick([A, B], rng=r.random).id for _ in range(200))  # type: ignore[union-attr]
    assert picks == {B.id: 200}


def test_least_outstanding_spreads_load_over_three() -> None:
    bal = balancer.Balancer()
    r = rng()
    for _ in range(300):
        c = bal.pick([A, B, C], rng=r.random)
        assert c is not None
        bal.started(c)
    loads = sorted(bal.outstanding(c.id) for c in (A, B, C))
    assert loads[-1] - loads[0] <= 4, loads  # two choices: the gap stays small


def test_exclude_and_nothing_left() -> None:
    bal = balancer.Balancer()
    assert bal.pick([A, B], rng=rng().random, exclude={A.id}) == B
    assert bal.pick([A, B], rng=rng().random, exclude={A.id, B.id}) is None


def test_affinity_is_stable_and_spreads_keys() -> None:
    bal = balancer.Balancer()
    owners: Counter[str] = Counter()
    for key in range(1, 400):
        first = bal.pick([A, B, C], rng=rng(key).random, affinity=key)
        again = bal.pick([C, B, A], rng=rng(key + 1).random, affinity=key)
        assert first == again  # the same replica whatever the order or the dice
        assert first is not None
        owners[first.id] += 1
    assert min(owners.values()) > 80, owners  # rendezvous hashing spreads keys


def test_affinity_survives_another_replica_leaving() -> None:
    bal = balancer.Balancer()
    moved = 0
    for key in range(1, 300):
        before = bal.pick([A, B, C], rng=rng().random, affinity=key)
        assert before is not None
        if before == C:
            continue
        after = bal.pick([A, B], rng=rng().random, affinity=key)
        moved += after != before
    assert moved == 0  # only C's keys move when C goes


def test_affinity_yields_when_its_replica_is_full() -> None:
    bal = balancer.Balancer()
    key = 12345
    owner = bal.pick([A, B], rng=rng().random, affinity=key)
    assert owner is not None
    for _ in range(owner.capacity):
        bal.started(owner)
    other = B if owner == A else A
    assert bal.pick([A, B], rng=rng().random, affinity=key) == other
    bal.finished(owner)
    assert bal.pick([A, B], rng=rng().random, affinity=key) == owner


def test_a_fatal_failure_ejects_every_replica_of_the_agent() -> None:
    bal = balancer.Balancer()
    bal.sync([A, B, A2])
    ejected = bal.failed(A, now=10.0, fatal=True, reason="connect_error")
    assert sorted(ejected) == sorted([A.id, A2.id])
    assert not bal.healthy(A.id)
    assert not bal.healthy(A2.id)
    assert bal.healthy(B.id)
    assert bal.pick([A, B], rng=rng().random) == B
    assert bal.pick([A], rng=rng().random) is None
    assert bal.pick([A], rng=rng().random, allow_ejected=True) == A  # panic mode


def test_plain_failures_eject_after_the_threshold_and_success_resets() -> None:
    bal = balancer.Balancer(failures_to_eject=3)
    assert bal.failed(B, now=1.0, fatal=False, reason="http_500") == []
    bal.succeeded(B, now=1.5)
    assert bal.failed(B, now=2.0, fatal=False, reason="http_500") == []
    assert bal.failed(B, now=2.1, fatal=False, reason="http_500") == []
    assert bal.failed(B, now=2.2, fatal=False, reason="http_500") == [B.id]


def test_probes_bring_a_replica_back_only_after_its_minimum_ejection() -> None:
    bal = balancer.Balancer(eject_min_s=1.0, eject_max_s=8.0)
    bal.failed(A, now=100.0, fatal=True, reason="connect_error")
    assert bal.ejected_origins(now=100.5) == set()
    assert bal.probe_ok(A.origin, now=100.5) == []
    assert bal.ejected_origins(now=101.0) == {A.origin}
    assert bal.probe_ok(A.origin, now=101.0) == [A.id]
    assert bal.healthy(A.id)
    # ejected again soon: the minimum doubles (backoff), up to eject_max_s
    bal.failed(A, now=102.0, fatal=True, reason="connect_error")
    assert bal.probe_ok(A.origin, now=103.5) == []
    assert bal.probe_ok(A.origin, now=104.0) == [A.id]
    for i in range(6):
        bal.probe_failed(A.origin, now=110.0 + 20 * i, reason="unresponsive")
        bal.probe_ok(A.origin, now=130.0 + 20 * i)
    assert bal.states[A.id].eject_until - bal.states[A.id].ejected_at <= 8.0


def test_saturation_counts_healthy_replicas_only() -> None:
    bal = balancer.Balancer()
    for _ in range(8):
        bal.started(A)
    assert not bal.saturated([A, B], limit=None)
    bal.failed(B, now=1.0, fatal=True, reason="connect_error")
    assert bal.saturated([A, B], limit=None)  # 8 >= 2 x capacity 4
    assert not bal.saturated([A, B], limit=9)


def test_sync_forgets_gone_replicas_but_not_busy_ones() -> None:
    bal = balancer.Balancer()
    bal.sync([A, B])
    bal.started(B)
    bal.sync([A])
    assert B.id in bal.states  # still has a request in flight
    bal.finished(B)
    bal.sync([A])
    assert set(bal.states) == {A.id}

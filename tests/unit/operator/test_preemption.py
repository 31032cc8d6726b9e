"""Priority and preemption (core.deployment.preemption): who may evict whom, the floor, the
reprieve, the nominations a preemptor keeps, the victim's back-off; property tests for the
rules that must never break (never an equal or higher priority, never below the floor, never
back before the back-off, the back-off grows)."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timedelta
from typing import Any

import kopf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxfleet_agent import contract
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core.deployment import autoscale, claims, intent
from mlxfleet_operator.core.deployment import evictions as ev
from mlxfleet_operator.core.deployment import preemption as pre
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.handlers import indexes
from tests.unit.operator.builders import GIB, NOW, A, fact, kopf_body, md, state

BASE = timedelta(seconds=30)
HIGH = pre.Tenant("ns", "high", priority=10, floor=1)


def tenant(name: str, priority: int = 0, floor: int = 0) -> pre.Tenant:
    return pre.Tenant("ns", name, priority=priority, floor=floor)


def occ(name: str, gib: int = 4, priority: int = 0, floor: int = 0) -> pre.Occupant:
    return pre.Occupant(slot=f"slot-{name}", bytes=gib * GIB, tenant=tenant(name, priority, floor))


def site(node: str, free_gib: int, *occupants: pre.Occupant) -> pre.Site:
    return pre.Site(node=node, free=free_gib * GIB, occupants=occupants)


def choose(
    *sites: pre.Site,
    footprint_gib: int = 6,
    missing: int = 1,
    spare: dict[str, int] | None = None,
    previous: dict[str, object] | None = None,
    me: pre.Tenant = HIGH,
) -> tuple[pre.Nomination, ...]:
    everyone = {o.tenant.key for s in sites for o in s.occupants if o.tenant is not None}
    return pre.choose(
        me,
        slot="slot-high",
        footprint=footprint_gib * GIB,
        missing=missing,
        sites=sites,
        spare=spare if spare is not None else dict.fromkeys(everyone, 1),
        previous=previous or {},  # type: ignore[arg-type]
        now=NOW,
    )


def victims(nominations: tuple[pre.Nomination, ...]) -> list[tuple[str, str]]:
    return [(n.node, e.victim.name) for n in nominations for e in n.evictions]


# ------------------------------------------------------------------------------- preemptor


def test_a_lower_priority_replica_is_evicted_where_only_memory_was_missing() -> None:
    got = choose(site("mac-1", 2, occ("low", 4)))
    assert victims(got) == [("mac-1", "low")]
    assert got[0].since == NOW
    assert got[0].bytes == 6 * GIB
    assert got[0].slot == "slot-high"


@pytest.mark.parametrize("priority", [pytest.param(10, id="equal"), pytest.param(11, id="higher")])
def test_never_an_equal_or_higher_priority(priority: int) -> None:
    assert choose(site("mac-1", 2, occ("peer", 4, priority=priority))) == ()


def test_never_below_the_floor() -> None:
    assert choose(site("mac-1", 2, occ("low", 4)), spare={"ns/low": 0}) == ()


@pytest.mark.parametrize(
    ("spec", "floor"),
    [
        pytest.param({"replicas": 2}, 2, id="no minReplicas: what it asks for"),
        pytest.param({"replicas": 2, "minReplicas": 1}, 1, id="minReplicas"),
        pytest.param({"replicas": 1, "minReplicas": 1, "maxReplicas": 3}, 1, id="scaled out"),
        pytest.param({"replicas": 1, "maxReplicas": 3}, 1, id="maxReplicas only: replicas"),
        pytest.param({"replicas": 1, "minReplicas": 0, "idleTimeout": "1h"}, 0, id="may sleep"),
        pytest.param({"replicas": 0, "minReplicas": 2}, 2, id="off"),
    ],
)
def test_the_floor_is_the_autoscalers_lower_bound(spec: dict[str, Any], floor: int) -> None:
    """Preemption never takes a deployment below the count the autoscaler never goes below on
    its own: spec.minReplicas, else spec.replicas (one number, read once)."""
    found = md(placements=None, **spec)
    assert pre.floor(found.spec) == floor
    assert pre.tenant(found).floor == floor
    assert autoscale.Bounds.of(found.spec).low == floor


def test_the_floor_counts_what_others_already_evict() -> None:
    low = tenant("low", floor=1)
    other = pre.Nomination(
        "mac-9", tenant("other", 20), "slot-other", GIB,
        (pre.Eviction("mac-9", "slot-low", low, GIB),), NOW,
    )  # fmt: skip
    assert pre.spare([low], placed={"ns/low": 2}, others=[other]) == {"ns/low": 0}
    assert pre.spare([low], placed={"ns/low": 3}, others=[other]) == {"ns/low": 1}


def test_not_enough_to_free_is_no_nomination() -> None:
    assert choose(site("mac-1", 1, occ("low", 2)), footprint_gib=6) == ()


def test_the_most_important_is_spared_while_the_rest_make_room() -> None:
    got = choose(site("mac-1", 0, occ("a", 4, priority=1), occ("b", 4, priority=5), occ("c", 4)))
    assert victims(got) == [("mac-1", "a"), ("mac-1", "c")]  # b (priority 5) reprieved


def test_the_node_whose_victims_matter_least_wins() -> None:
    got = choose(
        site("mac-1", 2, occ("five", 4, priority=5)),
        site("mac-2", 0, occ("x", 3, priority=2), occ("y", 3, priority=2)),
        site("mac-3", 2, occ("one", 4, priority=1)),
    )
    assert victims(got) == [("mac-3", "one")]  # lowest highest priority, before fewest victims


def test_fewest_victims_then_fewest_bytes_then_name() -> None:
    got = choose(site("mac-1", 0, occ("x", 3), occ("y", 3)), site("mac-2", 0, occ("z", 8)))
    assert victims(got) == [("mac-2", "z")]
    got = choose(site("mac-2", 2, occ("big", 8)), site("mac-1", 2, occ("small", 4)))
    assert victims(got) == [("mac-1", "small")]


def test_one_nomination_per_missing_replica_on_distinct_nodes() -> None:
    sites = [site(f"mac-{i}", 2, occ(f"low{i}", 4)) for i in range(3)]
    got = choose(*sites, missing=2)
    assert [n.node for n in got] == ["mac-0", "mac-1"]


def test_a_previous_nomination_keeps_its_node_and_time() -> None:
    earlier = NOW - timedelta(seconds=5)
    got = choose(
        site("mac-1", 2, occ("cheap", 4)),
        site("mac-2", 2, occ("dear", 4, priority=3)),
        previous={"mac-2": earlier},
    )
    assert victims(got) == [("mac-2", "dear")]
    assert got[0].since == earlier


def test_sites_are_the_nodes_refused_for_memory_with_their_replicas() -> None:
    mine = "slot-high"
    low_slot = contract.SlotStatus(
        name="slot-low", served_name="low", source="file:///m", phase="Ready", ready=True,
        estimated_memory_bytes=4 * GIB,
        spec=contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "low"}),
    )  # fmt: skip
    facts = {
        "mac-1": fact("mac-1", state(slots=[low_slot], budget=6 * GIB)),
        "mac-2": fact("mac-2", state(budget=6 * GIB), unschedulable=True),
    }
    decision = placement.Decision(
        nodes=(), kept=(), added=(), dropped=(), missing=1, fits_nowhere=False,
        rejections=(
            placement.Rejection("mac-1", placement.Reason.MEMORY, "full"),
            placement.Rejection("mac-2", placement.Reason.CORDONED, "cordoned"),
        ),
    )  # fmt: skip
    got = pre.sites(decision, facts, slot=mine, tenants={"slot-low": tenant("low")})
    assert got == [pre.Site("mac-1", 2 * GIB, (pre.Occupant("slot-low", 4 * GIB, tenant("low")),))]


def test_the_claim_counts_the_preemptor_in_full_once_its_victims_left() -> None:
    spec = contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "low"})
    low = contract.SlotStatus(
        name="slot-low", served_name="low", source="file:///m", phase="Ready", ready=True,
        estimated_memory_bytes=4 * GIB, spec=spec,
    )  # fmt: skip
    n = pre.Nomination(
        "mac-1", HIGH, "slot-high", 6 * GIB,
        (pre.Eviction("mac-1", "slot-low", tenant("low"), 4 * GIB),), NOW,
    )  # fmt: skip
    assert pre.claim(n, state(slots=[low])) == 2 * GIB
    assert pre.claim(n, state()) == 6 * GIB


# ---------------------------------------------------------------------------------- victim


def nomination(
    node: str, victim: pre.Tenant, *, by: pre.Tenant = HIGH, since: datetime = NOW
) -> pre.Nomination:
    evictions = (pre.Eviction(node, "slot-low", victim, 4 * GIB),)
    return pre.Nomination(node, by, "slot-high", 6 * GIB, evictions, since)


def test_the_victim_honours_a_higher_priority_within_its_floor() -> None:
    low = tenant("low", floor=1)
    both = [nomination("mac-1", low), nomination("mac-2", low)]
    assert [n.node for n in ev.honoured(low, both, current=["mac-1", "mac-2"])] == ["mac-1"]
    assert ev.honoured(low, both, current=["mac-1"]) == ()  # lost one since: at its floor
    peer = tenant("low", priority=10)
    assert ev.honoured(peer, [nomination("mac-1", peer)], current=["mac-1"]) == ()


def test_the_victim_records_each_eviction_once_and_leaves_and_avoids_the_node() -> None:
    low = tenant("low")
    taken = ev.honoured(low, [nomination("mac-1", low)], current=["mac-1"])
    records, new = ev.evicted([], taken, now=NOW, base=BASE)
    assert new == records
    assert len(new) == 1
    assert (new[0].node, new[0].deployment, new[0].priority) == ("mac-1", "ns/high", 10)
    assert new[0].backoff_until == NOW + BASE
    again, more = ev.evicted(records, taken, now=NOW + timedelta(seconds=3), base=BASE)
    assert more == []
    assert again == records
    leave = ev.leave(low, taken, records, now=NOW)
    assert "evicted for ns/high (priority 10 > 0)" in leave["mac-1"]
    later = ev.leave(low, (), records, now=NOW + BASE / 2)
    assert "back-off until" in later["mac-1"]
    assert ev.leave(low, (), records, now=NOW + BASE) == {}


def test_the_backoff_doubles_per_eviction_up_to_a_cap_and_old_ones_are_forgotten() -> None:
    assert [ev.backoff(n, BASE) / BASE for n in range(1, 8)] == [1, 2, 4, 8, 16, 16, 16]
    old = mdep.PreemptionStatus(
        node="mac-1", deployment="ns/high", priority=10, at=NOW - ev.window(BASE)
    )
    recent = old.model_copy(update={"at": NOW - timedelta(seconds=60)})
    records, new = ev.evicted(
        [old, recent], [nomination("mac-1", tenant("low"))], now=NOW, base=BASE
    )
    assert old not in records
    assert recent in records
    assert new[0].backoff_until == NOW + 2 * BASE  # the second within the window


def test_a_preempted_node_is_left_and_refused_by_placement() -> None:
    request = placement.Request(
        replicas=1, footprint_bytes=GIB, model=md().model_ref(), leave={"mac-1": "evicted"}
    )
    nodes = [placement.NodeView("mac-1", budget_bytes=8 * GIB), placement.NodeView("mac-2")]
    decision = placement.place(
        request, nodes, ("mac-1",), now=NOW, failover_delay=timedelta(seconds=15)
    )
    assert decision.dropped == ("mac-1",)
    assert decision.missing == 1
    assert decision.rejections[0] == placement.Rejection(
        "mac-1", placement.Reason.PREEMPTED, "evicted"
    )


# -------------------------------------------------------------------------------- the status


def test_the_preemptor_records_its_victims_while_it_waits_and_while_it_holds_the_node() -> None:
    low = tenant("low")
    n = nomination("mac-1", low)
    waiting = ev.preempting([n], [], holding=[])
    assert [(r.node, r.deployment, r.priority) for r in waiting] == [("mac-1", "ns/low", 0)]
    assert ev.previous(waiting, holding=[]) == {"mac-1": NOW}
    assert ev.preempting([], waiting, holding=["mac-1"]) == waiting  # it holds the node now
    assert ev.preempting([], waiting, holding=[]) == []  # gone from there: forgotten
    (event,) = ev.nominated_events([n], [])
    assert event.reason == "Preempting"
    assert "ns/low (priority 0 < 10) on mac-1" in event.message
    assert ev.nominated_events([n], waiting) == []
    assert "evicting ns/low (priority 0) on mac-1" in ev.waiting_text([n])


def test_the_victims_text_and_event_name_the_preemptor() -> None:
    low = tenant("low")
    victim = ev.as_victim(
        low, [nomination("mac-1", low)], current=["mac-1"], records=[], now=NOW, base=BASE
    )
    (event,) = ev.events_of(low, (), [], victim)
    assert event.reason == "Preempted"
    assert event.warning
    assert "replica on mac-1 evicted for ns/high (priority 10 > 0)" in event.message
    decision = placement.Decision(
        nodes=(), kept=(), added=(), dropped=("mac-1",), missing=1, fits_nowhere=False,
        rejections=(placement.Rejection("mac-1", placement.Reason.PREEMPTED, "x"),),
    )  # fmt: skip
    standing = ev.standing(
        low, nominations=(), preempting_before=[], victim=victim, decision=decision, now=NOW
    )
    assert "replica on mac-1 evicted for ns/high (priority 10 > 0)" in standing.evicted
    assert standing.preempted_by == victim.records


# --------------------------------------------------------------------------- property tests

priorities = st.integers(min_value=-3, max_value=3)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[pre.Tenant, list[pre.Site], dict[str, int]]:
    me = pre.Tenant("ns", "me", priority=draw(priorities))
    names = [f"d{i}" for i in range(draw(st.integers(1, 5)))]
    tenants = {n: tenant(n, draw(priorities), draw(st.integers(0, 2))) for n in names}
    placed = {t.key: 0 for t in tenants.values()}
    sites = []
    for i in range(draw(st.integers(1, 4))):
        here = draw(st.lists(st.sampled_from(names), unique=True, max_size=3))
        occupants = []
        for n in here:
            placed[tenants[n].key] += 1
            occupants.append(pre.Occupant(f"slot-{n}", draw(st.integers(1, 6)) * GIB, tenants[n]))
        sites.append(pre.Site(f"mac-{i}", draw(st.integers(-2, 4)) * GIB, tuple(occupants)))
    return me, sites, placed


@settings(max_examples=300, deadline=None)
@given(fleet=fleets(), footprint=st.integers(1, 10), missing=st.integers(0, 3))
def test_never_equal_or_higher_never_below_the_floor_and_always_enough_room(
    fleet: tuple[pre.Tenant, list[pre.Site], dict[str, int]], footprint: int, missing: int
) -> None:
    me, sites, placed = fleet
    victims_ = {o.tenant for s in sites for o in s.occupants if o.tenant is not None}
    spare = pre.spare(victims_, placed=placed, others=[])
    got = pre.choose(
        me, slot="slot-me", footprint=footprint * GIB, missing=missing, sites=sites,
        spare=spare, previous={}, now=NOW,
    )  # fmt: skip
    assert len(got) <= missing
    assert len({n.node for n in got}) == len(got)
    by_node = {s.node: s for s in sites}
    evicted: dict[str, int] = {}
    for n in got:
        freed = sum(e.bytes for e in n.evictions)
        assert by_node[n.node].free + freed >= footprint * GIB  # it makes room
        assert by_node[n.node].free < footprint * GIB  # and only where room was missing
        for e in n.evictions:
            assert e.victim.priority < me.priority
            evicted[e.victim.key] = evicted.get(e.victim.key, 0) + 1
    for t in victims_:
        assert placed[t.key] - evicted.get(t.key, 0) >= min(t.floor, placed[t.key])


@settings(max_examples=200, deadline=None)
@given(fleet=fleets())
def test_equal_priorities_never_evict_each_other(
    fleet: tuple[pre.Tenant, list[pre.Site], dict[str, int]],
) -> None:
    _, sites, _placed = fleet
    same = [
        pre.Site(s.node, s.free, tuple(
            pre.Occupant(o.slot, o.bytes, tenant(o.slot, 0, 0)) for o in s.occupants
        ))
        for s in sites
    ]  # fmt: skip
    everyone = {o.tenant for s in same for o in s.occupants if o.tenant is not None}
    got = pre.choose(
        tenant("me", 0), slot="slot-me", footprint=GIB, missing=3, sites=same,
        spare=dict.fromkeys((t.key for t in everyone), 9), previous={}, now=NOW,
    )  # fmt: skip
    assert got == ()


@settings(max_examples=200, deadline=None)
@given(wants=st.lists(st.booleans(), min_size=1, max_size=120))
def test_under_back_off_an_evicted_replica_never_comes_straight_back(wants: list[bool]) -> None:
    """A preemptor that wants the node on some ticks and not on others (scaling up and down)
    against one victim: the victim never returns to the node before its back-off ends, and each
    eviction within the window backs it off at least as long as the one before (doubling, up to
    the cap): however the preemptor flaps, the victim is evicted at a falling rate."""
    low, step = tenant("low"), timedelta(seconds=10)
    records: list[mdep.PreemptionStatus] = []
    on_node, now = True, NOW
    backoffs: list[timedelta] = []
    for want in wants:
        now += step
        nominations = [nomination("mac-1", low, since=now)] if want and on_node else []
        victim = ev.as_victim(
            low, nominations, current=["mac-1"] if on_node else [], records=records,
            now=now, base=BASE,
        )  # fmt: skip
        records = list(victim.records)
        if victim.taken:
            on_node = False
            (new,) = victim.new
            assert new.backoff_until is not None
            backoffs.append(new.backoff_until - new.at)
        elif not on_node and not want and "mac-1" not in victim.leave:
            on_node = True  # memory free, back-off over: it comes back
            last = max(records, key=lambda r: r.at)
            assert last.backoff_until is not None
            assert now >= last.backoff_until
    for before, after in itertools.pairwise(backoffs):
        assert after >= min(before, ev.backoff(ev.BACKOFF_GROWTH_MAX, BASE)) or (
            after == BASE  # the window passed since the last: counted afresh
        )


def test_a_node_given_to_the_preemptor_stays_promised_until_its_agent_lists_the_slot() -> None:
    n = nomination("mac-1", tenant("low"))
    added = placement.Decision(("mac-1",), (), ("mac-1",), (), (), 0, False)
    empty = {"mac-1": fact("mac-1", state())}
    assert pre.landing([n], added, empty, slot="slot-high") == (n,)
    mine = contract.SlotStatus(
        name="slot-high", served_name="high", source="file:///m", phase="Loading", ready=False
    )
    listed = {"mac-1": fact("mac-1", state(slots=[mine]))}
    assert pre.landing([n], added, listed, slot="slot-high") == ()
    elsewhere = placement.Decision(("mac-2",), (), ("mac-2",), (), (), 0, False)
    assert pre.landing([n], elsewhere, empty, slot="slot-high") == ()


def test_nominated_again_while_the_victim_backs_off_is_the_same_eviction() -> None:
    """A preemptor whose PUT the agent refused while the evicted replica drained nominates the
    node again: no second record, no second Event, no longer back-off."""
    low = tenant("low")
    first, _ = ev.evicted([], [nomination("mac-1", low)], now=NOW, base=BASE)
    later = NOW + timedelta(seconds=5)
    again = nomination("mac-1", low, since=later)
    records, new = ev.evicted(first, [again], now=later, base=BASE)
    assert new == []
    assert records == first


def _body(**spec: object) -> kopf.Body:
    raw = {
        "metadata": {"name": "low", "namespace": "ns", "uid": "u"},
        "spec": {"model": {"source": "file:///m"}, **spec},
    }
    return kopf_body(raw)


def test_the_deployment_index_knows_the_tenant_and_leaves_out_what_it_cannot_evict() -> None:
    slot = naming.slot_name("ns", "low")

    def tenant_of(body: kopf.Body) -> pre.Tenant | None:
        index = indexes.deployments(namespace="ns", name="low", body=body)
        assert list(index) == [slot]
        assert index[slot].claim == claims.SlotClaim("", "ns", "low", "u")  # claimed all the same
        return index[slot].tenant

    got = tenant_of(_body(priority=3, replicas=2, minReplicas=1))
    assert got == pre.Tenant("ns", "low", priority=3, floor=1)
    assert tenant_of(_body(replicas=2)) == tenant("low", 0, 2)
    assert tenant_of(_body(replicas=1, sharding={"size": 2})) is None
    deep = _body(
        server={
            "chatTemplateArgs": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}
        }
    )
    assert tenant_of(deep) is None  # InvalidSpec: never placed, no traceback


def test_the_handlers_view_of_the_deployment_index() -> None:
    """Eviction candidates, slot conflicts and ready replicas, all from the one index: a slot
    name with one evictable deployment (beside a sharded one that shares it) is evictable, two
    evictable ones on a name are nobody's, a SwapPlan that runs keeps its replicas."""

    def entry(name: str, created: str, *, ready: int = 0, **spec: object) -> indexes.Deployment:
        body = kopf_body(
            {
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"model": {"source": "file:///m"}, **spec},
                "status": {"readyReplicas": ready},
            }
        )
        (found,) = indexes.deployments(namespace="ns", name=name, body=body).values()
        return dataclasses.replace(found, claim=dataclasses.replace(found.claim, created=created))

    low, high = entry("low", "1", ready=2, replicas=2), entry("high", "2", priority=5)
    shard = entry("shard", "3", ready=1, replicas=1, sharding={"size": 2})
    idx = indexes.Indexes(
        nodes={},
        deployments={"a": [low, shard], "b": [low, high], "c": [high]},
        plans={},
    )
    assert idx.evictable(["a", "b", "c", "d"], below=5) == {"a": low.tenant}
    assert idx.evictable(["a", "c"], below=9) == {"a": low.tenant, "c": high.tenant}
    assert idx.evictable(["a"], below=0) == {}
    running = swp.SwapPlan.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"deploymentRef": {"name": "low"}, "target": {"source": "file:///n"}},
        }
    )
    moving = dataclasses.replace(idx, plans={("ns", "low"): [running]})
    assert moving.evictable(["a"], below=5) == {}
    assert idx.ready_replicas("ns") == {"low": 2, "high": 0, "shard": 1}
    assert idx.ready_replicas("other") == {}
    assert (idx.ready_of("ns", "low"), idx.ready_of("ns", "gone")) == (0, 0)  # not its slot key
    keyed = indexes.Indexes(nodes={}, deployments={naming.slot_name("ns", "low"): [low]}, plans={})
    assert keyed.ready_of("ns", "low") == 2
    assert keyed.slot_conflict("ns", "low", "low") is None
    clash = dataclasses.replace(low, claim=claims.SlotClaim("0", "ns", "older", "x"))
    shared = indexes.Indexes(
        nodes={}, deployments={naming.slot_name("ns", "low"): [low, clash]}, plans={}
    )
    assert "ns/older" in (shared.slot_conflict("ns", "low", "low") or "")


def test_an_evicted_replica_moves_make_before_break_where_memory_allows() -> None:
    """The victim's replica on mac-1 is evicted while mac-2 has room: placement adds mac-2
    and drops mac-1, which keeps serving (and stays published) until mac-2 serves; with no
    room anywhere it is unpublished at once and its slot removed on the next reconcile."""
    slot = naming.slot_name("ns", "chat")
    serving = contract.SlotStatus(
        name=slot, served_name="chat", source=A, phase="Ready", ready=True,
        estimated_memory_bytes=4 * GIB,
    )  # fmt: skip
    victim = md(replicas=1, minReplicas=0, idleTimeout="1h", placements=[
        {"node": "mac-1", "phase": "Ready", "ready": True, "source": A},
    ])  # fmt: skip
    me = pre.tenant(victim)
    n = nomination("mac-1", me)
    away = ev.as_victim(me, [n], current=["mac-1"], records=[], now=NOW, base=BASE)
    room = [fact("mac-1", state(slots=[serving], budget=8 * GIB)), fact("mac-2", state())]
    want = intent.intent(
        victim, room, plan=None, footprint_bytes=4 * GIB, now=NOW,
        failover_delay=timedelta(seconds=15), leave=away.leave,
    )  # fmt: skip
    assert want.decision.added == ("mac-2",)
    assert want.decision.dropped == ("mac-1",)
    assert want.handover.leaving == ("mac-1",)  # serves until mac-2 does
    assert want.deletes == ()
    full = [room[0], fact("mac-2", state(budget=2 * GIB))]
    nowhere = intent.intent(
        victim, full, plan=None, footprint_bytes=4 * GIB, now=NOW,
        failover_delay=timedelta(seconds=15), leave=away.leave,
    )  # fmt: skip
    assert nowhere.decision.missing == 1
    assert nowhere.handover.retiring == ("mac-1",)  # out of the endpoints now, slot next

"""Placement: filters with reasons, scoring, stability, failover delay; property tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import placement

M = ModelRef("file:///m")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
DELAY = timedelta(seconds=15)
GIB = 2**30


def node(name: str, **kw: object) -> placement.NodeView:
    defaults: dict[str, object] = {"budget_bytes": 16 * GIB}
    defaults.update(kw)
    return placement.NodeView(name=name, **defaults)  # type: ignore[arg-type]


def req(replicas: int = 1, footprint: int = 4 * GIB, **kw: object) -> placement.Request:
    return placement.Request(replicas=replicas, footprint_bytes=footprint, model=M, **kw)  # type: ignore[arg-type]


def place(
    request: placement.Request, nodes: list[placement.NodeView], current: tuple[str, ...] = ()
) -> placement.Decision:
    return placement.place(request, nodes, current, now=NOW, failover_delay=DELAY)


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        pytest.param({"unschedulable": True}, placement.Reason.CORDONED, id="cordoned"),
        pytest.param({"ready": False}, placement.Reason.NOT_READY, id="not-ready"),
        pytest.param({"used_bytes": 14 * GIB}, placement.Reason.MEMORY, id="busy"),
        pytest.param({"budget_bytes": 2 * GIB}, placement.Reason.TOO_SMALL, id="too-small"),
        pytest.param({"labels": {"chip": "m1"}}, placement.Reason.SELECTOR, id="selector"),
    ],
)
def test_each_filter_rejects_with_its_reason(
    kw: dict[str, object], reason: placement.Reason
) -> None:
    decision = place(req(node_selector={"chip": "m2"} if "labels" in kw else {}), [node("a", **kw)])
    assert decision.nodes == ()
    assert decision.missing == 1
    assert [(r.node, r.reason) for r in decision.rejections] == [("a", reason)]


def test_explicit_nodes_only() -> None:
    decision = place(req(replicas=1, nodes=("b",)), [node("a"), node("b")])
    assert decision.nodes == ("b",)
    assert decision.rejections[0].reason == placement.Reason.NOT_LISTED


def test_memory_message_names_the_numbers() -> None:
    decision = place(req(footprint=20 * GIB), [node("a")])
    assert decision.fits_nowhere
    assert "20.00 GiB" in decision.rejection_summary()
    assert "16.00 GiB" in decision.rejection_summary()


def test_busy_nodes_are_waiting_not_stalled() -> None:
    decision = place(req(), [node("a", used_bytes=15 * GIB), node("b", ready=False)])
    assert not decision.fits_nowhere
    assert decision.missing == 1


def test_empty_fleet_is_not_stalled() -> None:
    assert not place(req(), []).fits_nowhere


def test_spread_prefers_most_room_binpack_least() -> None:
    nodes = [node("a", used_bytes=8 * GIB), node("b", used_bytes=2 * GIB)]
    assert place(req(), nodes).nodes == ("b",)
    assert place(req(strategy=placement.Strategy.BIN_PACK), nodes).nodes == ("a",)


def test_cached_weights_win_over_room() -> None:
    nodes = [node("a", used_bytes=8 * GIB, cached=frozenset({M})), node("b")]
    assert place(req(), nodes).nodes == ("a",)


def test_explicit_nodes_are_an_order_of_preference() -> None:
    nodes = [node("a"), node("b", cached=frozenset({M})), node("c")]
    assert place(req(replicas=2, nodes=("c", "a", "b")), nodes).nodes == ("c", "a")


def test_distinct_nodes_per_replica() -> None:
    decision = place(req(replicas=3), [node("a"), node("b")])
    assert sorted(decision.nodes) == ["a", "b"]
    assert decision.missing == 1


def test_healthy_replica_is_never_moved_for_a_better_node() -> None:
    nodes = [node("a", used_bytes=10 * GIB), node("b"), node("c", cached=frozenset({M}))]
    decision = place(req(), nodes, current=("a",))
    assert decision.nodes == ("a",)
    assert decision.kept == ("a",)
    assert decision.dropped == ()


def test_cordon_does_not_evict() -> None:
    assert place(req(), [node("a", unschedulable=True), node("b")], current=("a",)).nodes == ("a",)


def test_drain_moves_the_replica_to_another_node() -> None:
    draining = node("a", unschedulable=True, draining=True)
    decision = place(req(), [draining, node("b")], current=("a",))
    assert (decision.nodes, decision.added, decision.dropped) == (("b",), ("b",), ("a",))


def test_drain_with_nowhere_to_go_keeps_the_replica() -> None:
    draining = node("a", unschedulable=True, draining=True)
    full = node("b", used_bytes=100 * GIB)
    decision = place(req(), [draining, full], current=("a",))
    assert (decision.nodes, decision.dropped, decision.missing) == (("a",), (), 0)


def test_draining_node_takes_no_new_replica() -> None:
    decision = place(req(), [node("a", draining=True)], current=())
    assert decision.nodes == ()
    assert decision.rejections[0].reason is placement.Reason.CORDONED


def test_lost_node_keeps_replica_within_delay_then_fails_over() -> None:
    lost = node("a", ready=False, not_ready_since=NOW - timedelta(seconds=5))
    assert place(req(), [lost, node("b")], current=("a",)).nodes == ("a",)
    gone = node("a", ready=False, not_ready_since=NOW - timedelta(seconds=16))
    decision = place(req(), [gone, node("b")], current=("a",))
    assert decision.nodes == ("b",)
    assert decision.dropped == ("a",)


def test_returning_node_is_not_double_booked() -> None:
    # after failover the replica lives on b; a comes back: a is not chosen again
    decision = place(req(), [node("a"), node("b")], current=("b",))
    assert decision.nodes == ("b",)


def test_scale_down_drops_extra_and_duplicates_count_once() -> None:
    decision = place(req(replicas=1), [node("a"), node("b")], current=("a", "a", "b"))
    assert decision.nodes == ("a",)
    assert decision.dropped == ("b",)


def test_selector_change_moves_replica() -> None:
    nodes = [node("a", labels={"pool": "x"}), node("b", labels={"pool": "y"})]
    decision = place(req(node_selector={"pool": "y"}), nodes, current=("a",))
    assert decision.nodes == ("b",)
    assert decision.dropped == ("a",)


# ---------------------------------------------------------------------------------- properties

names = st.sampled_from([f"n{i}" for i in range(6)])
HOT = placement.Pressure(placement.Reason.MEMORY_PRESSURE, "memory pressure warn")
nodes_st = st.lists(
    st.builds(
        placement.NodeView,
        name=names,
        labels=st.sampled_from([{}, {"pool": "x"}]),
        unschedulable=st.booleans(),
        ready=st.booleans(),
        not_ready_since=st.sampled_from(
            [None, NOW - timedelta(seconds=1), NOW - timedelta(hours=1)]
        ),
        budget_bytes=st.integers(0, 32).map(lambda g: g * GIB),
        used_bytes=st.integers(0, 32).map(lambda g: g * GIB),
        cached=st.sampled_from([frozenset(), frozenset({M})]),
        pressures=st.sampled_from([(), (HOT,)]),
    ),
    max_size=6,
    unique_by=lambda n: n.name,
)
requests_st = st.builds(
    placement.Request,
    replicas=st.integers(0, 5),
    footprint_bytes=st.integers(1, 20).map(lambda g: g * GIB),
    model=st.just(M),
    strategy=st.sampled_from(list(placement.Strategy)),
    node_selector=st.sampled_from([{}, {"pool": "x"}]),
    nodes=st.sampled_from([None, ("n0", "n1", "n2", "n3", "n4")]),
    leave=st.sampled_from([{}, {"n1": "evicted"}, {"n0": "evicted", "n3": "backing off"}]),
)


@settings(max_examples=300, deadline=None)
@given(request=requests_st, nodes=nodes_st, current=st.lists(names, max_size=4))
def test_placement_invariants(
    request: placement.Request, nodes: list[placement.NodeView], current: list[str]
) -> None:
    decision = place(request, nodes, tuple(current))
    by_name = {n.name: n for n in nodes}
    # distinct nodes, never more than asked, missing accounts for the rest
    assert len(set(decision.nodes)) == len(decision.nodes) <= request.replicas
    assert decision.missing == request.replicas - len(decision.nodes)
    assert set(decision.kept) | set(decision.added) == set(decision.nodes)
    for name in decision.nodes:
        n = by_name[name]
        assert n.budget_bytes - n.used_bytes >= request.footprint_bytes
        assert request.nodes is None or name in request.nodes
        assert all(n.labels.get(k) == v for k, v in request.node_selector.items())
    for name in decision.added:  # new replicas only on ready, schedulable, unpressed nodes
        assert by_name[name].ready
        assert not by_name[name].unschedulable
        assert not by_name[name].pressures
    for name in decision.nodes:  # never on a node the deployment must leave
        assert name not in request.leave
    # every node not chosen says why; a shortfall is never "not needed"
    rejected = {r.node: r.reason for r in decision.rejections}
    assert set(rejected) == set(by_name) - set(decision.nodes)
    if decision.missing:
        assert placement.Reason.NOT_NEEDED not in rejected.values()
    # stability: a current replica on a healthy eligible node stays (up to the replica count)
    static = (placement.Reason.NOT_LISTED, placement.Reason.SELECTOR, placement.Reason.TOO_SMALL)
    for name in dict.fromkeys(current):
        held = by_name.get(name)
        if held is None or not held.ready or rejected.get(name) in static:
            continue
        if name in request.leave:  # evicted: it goes (pressure alone never moves a replica)
            continue
        fits = held.budget_bytes - held.used_bytes >= request.footprint_bytes
        if fits and len(decision.kept) < request.replicas:
            assert name in decision.kept
    # dropped = current minus chosen; order of the node list does not matter
    assert set(decision.dropped) == set(current) - set(decision.nodes)
    assert place(request, list(reversed(nodes)), tuple(current)) == decision


def test_nodes_whose_agent_cannot_run_the_engine_are_rejected_naming_it() -> None:
    embed = frozenset({"mlx-lm", "mlx-embed"})
    nodes = [
        node("a", engines=embed),
        node("b", engine_reasons={"mlx-embed": "tokenizers not installed"}),
        node("c"),  # an agent older than engines: mlx-lm only
    ]
    decision = place(req(replicas=1, engine="mlx-embed"), nodes)
    assert decision.nodes == ("a",)
    rejected = {r.node: r for r in decision.rejections}
    assert rejected["b"].reason == placement.Reason.ENGINE
    assert "engine mlx-embed: tokenizers not installed" in rejected["b"].message
    assert "engine mlx-embed" in rejected["c"].message
    assert place(req(replicas=1), nodes).nodes  # mlx-lm still goes anywhere


def test_an_engine_no_node_runs_is_engine_unavailable_not_waiting() -> None:
    nodes = [node("a"), node("b", engine_reasons={"vllm": "no NVIDIA GPU found"})]
    decision = place(req(replicas=1, engine="vllm"), nodes)
    assert decision.fits_nowhere
    assert placement.nowhere_reason(decision) == "EngineUnavailable"
    assert "cannot run engine vllm: no NVIDIA GPU found" in decision.rejection_summary()
    too_big = place(req(footprint=20 * GIB), [node("a")])
    assert placement.nowhere_reason(too_big) == "InsufficientMemory"

"""Group placement (core.fleet.groupplacement): rank shares, fit on every node, fabric and cache
preference, rejections naming nodes, failover delay, surge-or-hold; property-tested with
hypothesis."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxfleet_agent import contract
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import sharded
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement, placement

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DELAY = timedelta(seconds=15)
GIB = 2**30


def request(**kw: object) -> groupplacement.GroupRequest:
    base: dict[str, object] = {
        "groups": 1,
        "size": 2,
        "mode": groupplacement.Mode.TENSOR,
        "weights_bytes": 40 * GIB,
        "kv_bytes": 8 * GIB,
        "overhead_bytes": GIB,
        "num_layers": 80,
        "num_kv_heads": 8,
        "model": ModelRef("hf://m"),
    }
    base.update(kw)
    return groupplacement.GroupRequest(**base)  # type: ignore[arg-type]


def node(name: str, budget: int = 64 * GIB, **kw: object) -> placement.NodeView:
    return placement.NodeView(name=name, budget_bytes=budget, **kw)  # type: ignore[arg-type]


def place(
    req: groupplacement.GroupRequest,
    nodes: list[placement.NodeView],
    current: list[list[str]] | None = None,
) -> groupplacement.GroupDecision:
    return groupplacement.place_groups(req, nodes, current or [], now=NOW, failover_delay=DELAY)


def test_tensor_rank_holds_its_share_of_weights_and_kv() -> None:
    d = place(request(), [node("a"), node("b"), node("c", budget=10 * GIB)])
    (group,) = d.groups
    assert group.nodes == ("a", "b")
    assert {r.memory_bytes for r in group.ranks} == {20 * GIB + 4 * GIB + GIB}
    (rej,) = [r for r in d.rejections if r.node == "c"]
    assert "25.00 GiB" in rej.message
    assert rej.reason == placement.Reason.MEMORY


def test_kv_heads_not_divisible_is_unsplittable() -> None:
    d = place(request(size=3), [node("a"), node("b"), node("c")])
    assert d.unsplittable is not None
    assert "8 KV heads" in d.unsplittable
    assert d.groups == ()


def test_pipeline_layers_follow_free_memory() -> None:
    req = request(mode=groupplacement.Mode.PIPELINE, num_kv_heads=None)
    d = place(req, [node("a", budget=96 * GIB), node("b", budget=32 * GIB)])
    (group,) = d.groups
    assert [r.layers for r in group.ranks] == [60, 20]
    assert group.ranks[0].memory_bytes > group.ranks[1].memory_bytes


def test_prefers_one_fabric_then_cached_weights() -> None:
    ring = {groupplacement.FABRIC_LABEL: "tb5-ring-1"}
    nodes = [
        node("a", budget=128 * GIB),
        node("b", budget=128 * GIB, cached=frozenset({ModelRef("hf://m")})),
        node("r1", labels=ring),
        node("r2", labels=ring, cached=frozenset({ModelRef("hf://m")})),
    ]
    (group,) = place(request(), nodes).groups
    assert group.nodes == ("r2", "r1")


def test_lost_node_waits_for_the_failover_delay_then_is_replaced() -> None:
    lost = node("b", ready=False, not_ready_since=NOW - timedelta(seconds=5))
    nodes = [node("a"), lost, node("c")]
    waiting = place(request(), nodes, [["a", "b"]])
    assert waiting.groups == ()
    assert waiting.missing == 1
    gone = node("b", ready=False, not_ready_since=NOW - timedelta(seconds=60))
    (group,) = place(request(), [node("a"), gone, node("c")], [["a", "b"]]).groups
    assert group.nodes == ("a", "c")  # the healthy rank keeps its place (rank 0)
    assert not group.kept


def test_kept_group_stays_even_when_a_better_node_appears() -> None:
    (group,) = place(
        request(), [node("a"), node("b"), node("big", budget=512 * GIB)], [["b", "a"]]
    ).groups
    assert group.nodes == ("b", "a")
    assert group.kept


def test_no_new_rank_on_a_node_under_pressure_and_a_kept_group_stays_there() -> None:
    hot = placement.Pressure(placement.Reason.MEMORY_PRESSURE, "memory pressure warn")
    nodes = [node("a"), node("b", pressures=(hot,)), node("c")]
    decision = place(request(), nodes)
    (group,) = decision.groups
    assert set(group.nodes) == {"a", "c"}
    assert placement.Rejection("b", placement.Reason.MEMORY_PRESSURE, "memory pressure warn") in (
        decision.rejections
    )
    (kept,) = place(request(), nodes, [["b", "a"]]).groups
    assert kept.kept
    assert kept.nodes == ("b", "a")


@pytest.mark.parametrize(
    ("room", "mode"),
    [
        pytest.param(64 * GIB, groupplacement.SwapMode.SURGE, id="room-for-both"),
        pytest.param(40 * GIB, groupplacement.SwapMode.HOLD, id="no-room"),
    ],
)
def test_swap_mode_surges_only_when_every_node_has_room(
    room: int, mode: groupplacement.SwapMode
) -> None:
    req = request()
    nodes = [node("a", budget=room), node("b", budget=64 * GIB)]
    group = groupplacement.GroupPlan(
        index=0, ranks=groupplacement.plan_ranks(req, nodes)[0], kept=False
    )
    got, why = groupplacement.swap_mode(req, nodes, {"a": 25 * GIB, "b": 25 * GIB}, group)
    assert got == mode
    if mode == groupplacement.SwapMode.HOLD:
        assert why.startswith("hold: a:")


nodes_st = st.lists(
    st.builds(
        lambda i, budget, used, ready, fabric, cached: placement.NodeView(
            name=f"n{i}",
            budget_bytes=budget * GIB,
            used_bytes=used * GIB,
            ready=ready,
            labels={groupplacement.FABRIC_LABEL: fabric} if fabric else {},
            cached=frozenset({ModelRef("hf://m")}) if cached else frozenset(),
        ),
        st.integers(0, 10_000),
        st.integers(0, 256),
        st.integers(0, 64),
        st.booleans(),
        st.sampled_from([None, "ring-1", "ring-2"]),
        st.booleans(),
    ),
    max_size=12,
    unique_by=lambda n: n.name,
)


@settings(max_examples=200, deadline=None)
@given(
    nodes=nodes_st,
    groups=st.integers(0, 4),
    size=st.integers(2, 5),
    mode=st.sampled_from(list(groupplacement.Mode)),
    weights=st.integers(1, 300),
    layers=st.integers(1, 100),
)
def test_properties(
    nodes: list[placement.NodeView],
    groups: int,
    size: int,
    mode: groupplacement.Mode,
    weights: int,
    layers: int,
) -> None:
    req = request(
        groups=groups,
        size=size,
        mode=mode,
        weights_bytes=weights * GIB,
        num_layers=layers,
        num_kv_heads=None,
    )
    d = place(req, nodes)
    by_name = {n.name: n for n in nodes}
    chosen = d.nodes
    assert len(chosen) == len(set(chosen))  # every rank of every group on its own node
    assert len(d.groups) + d.missing == groups
    for g in d.groups:
        assert len(g.ranks) == size
        assert [r.rank for r in g.ranks] == list(range(size))
        if mode == groupplacement.Mode.PIPELINE:
            assert sum(r.layers for r in g.ranks) == layers
            assert all(r.layers >= 1 for r in g.ranks)
        for r in g.ranks:
            n = by_name[r.node]
            assert n.ready
            assert n.budget_bytes - n.used_bytes >= r.memory_bytes  # fits, every node
    for rej in d.rejections:  # each rejection names a node that was not chosen, and why
        assert rej.node in by_name
        assert rej.node not in chosen
        assert rej.message
    if d.missing and d.unsplittable is None:  # else one message names the model
        assert {r.node for r in d.rejections} == set(by_name) - set(chosen)


@given(st.text(min_size=1, max_size=40), st.integers(1, 10_000), st.integers(0, 15))
def test_ring_ports_stay_below_the_ephemeral_ranges(slot: str, epoch: int, rank: int) -> None:
    """Linux hands out 32768-60999 and macOS 49152-65535 to outgoing connections: a ring port
    there can be taken (EADDRINUSE at the rank's bind)."""
    port = sharded.ring_port(slot, f"g0-{epoch}", rank, salt="7e5c9a3c-uid")
    assert 20_000 <= port < 32_768


def test_ring_ports_follow_the_deployments_uid_not_only_its_slot_and_formation() -> None:
    """Issue 22 item 7: the port followed from the slot name and the formation id alone, so
    anyone on the network could tell where a group would listen next; the deployment's uid (a
    random UUID the API server chose) salts it now: stable for one object (every reconcile
    computes the same), spread over the range across objects."""
    uids = [str(uuid.UUID(int=random.Random(i).getrandbits(128), version=4)) for i in range(300)]
    ports = {sharded.ring_port("chat", "g0-3", 0, salt=u) for u in uids}
    assert len(ports) > 200  # not one predictable port per slot and formation
    assert {sharded.ring_port("chat", "g0-3", 0, salt=uids[0]) for _ in range(3)} == {
        sharded.ring_port("chat", "g0-3", 0, salt=uids[0])
    }
    by_formation = {sharded.ring_port("chat", f"g0-{e}", 0, salt=uids[0]) for e in range(1, 21)}
    assert len(by_formation) > 15  # each formation its own ports (a collision now and then)


def test_a_node_without_a_fabric_address_takes_no_rank() -> None:
    """Issue 22 item 7: ranks listened on the agent's LAN address; a rank goes only where its
    agent names a fabric address (`--fabric-address`), and the node left out says why."""
    d = place(request(), [node("a", budget=128 * GIB, fabric=None), node("b"), node("c")])
    (group,) = d.groups
    assert group.nodes == ("b", "c")
    (rej,) = [r for r in d.rejections if r.node == "a"]
    assert rej.reason == placement.Reason.NO_FABRIC
    assert "--fabric-address" in rej.message
    assert placement.Reason.NO_FABRIC in placement.STATIC  # a person must act


def _fact(url: str, fabric: str | None, *, reported: bool = True) -> dep.NodeFacts:
    body: dict[str, object] = {
        "agentVersion": "x",
        "os": "macOS",
        "chip": "M2",
        "memory": {"totalBytes": 1, "availableBytes": 1, "budgetBytes": 1},
        "disk": {"freeBytes": 1, "totalBytes": 1},
        "dataPort": 8471,
        "startedAt": "2026-01-01T00:00:00Z",
        "slots": [],
        "cachedModels": [],
    }
    if reported:
        body["fabricAddress"] = fabric
    node_ = inode.InferenceNode.model_validate(
        {
            "metadata": {"name": "n"},
            "spec": {"agent": {"url": url, "tokenSecretRef": {"name": "t"}}},
        }
    )
    state = contract.AgentState.model_validate(body)
    return dep.NodeFacts(node=node_, state=state, endpoint=None)


def test_ranks_listen_on_the_fabric_address_not_the_agent_url() -> None:
    lan = "https://mac-1.lan:8470"
    facts = {"n": _fact(lan, "10.10.0.1")}
    (host,) = sharded.hosts(facts, ["n"], slot="chat", group_id="g0-1", salt="u")
    assert host.startswith("10.10.0.1:")
    assert _fact(lan, None).fabric_address is None  # a new agent without one: no ranks
    assert _fact(lan, None, reported=False).fabric_address == "mac-1.lan"  # an old agent

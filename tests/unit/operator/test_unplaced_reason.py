"""A replica that finds no node always says why (new-user test: `kubectl scale mdep/tiny-chat
--replicas=3` on two nodes read `2/3 ready, 1 unplaced: ` with nothing after the colon, because
the nodes that already run a replica are chosen, not rejected). Pure: placement's and group
placement's summaries and the deployment's Ready/Reconciling message."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import replicas
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.fleet import groupplacement, placement
from mlxfleet_operator.core.kit import naming
from tests.unit.operator.builders import GIB, NOW, fact, md, state
from tests.unit.operator.test_placement import names, nodes_st, requests_st

M = ModelRef("file:///m")
DELAY = timedelta(seconds=15)


def view(name: str, **kw: object) -> placement.NodeView:
    return placement.NodeView(name=name, budget_bytes=16 * GIB, **kw)  # type: ignore[arg-type]


def test_more_replicas_than_nodes_names_the_nodes_that_already_run_one() -> None:
    """The demo: two nodes, three replicas; both nodes run one, the third has nowhere to go."""
    request = placement.Request(replicas=3, footprint_bytes=GIB, model=M)
    nodes = [view("mac-mini-1"), view("mac-mini-2")]
    decision = placement.place(
        request, nodes, ("mac-mini-1", "mac-mini-2"), now=NOW, failover_delay=DELAY
    )
    assert decision.missing == 1
    assert decision.rejections == ()  # chosen nodes are not rejections (the invariant holds)
    assert decision.rejection_summary() == (
        "mac-mini-1, mac-mini-2: already has a replica of this deployment (one per node)"
    )


def test_the_deployments_message_says_why_after_the_colon() -> None:
    """Through the handler's path: facts from the agents, `replicas.place`, the verdict."""
    slot = naming.slot_name("ns", "chat")
    running = contract.SlotStatus(
        name=slot, served_name="chat", source="file:///models/a", phase="Ready", ready=True
    )
    facts = [fact(n, state(slots=[running])) for n in ("mac-mini-1", "mac-mini-2")]
    d = md(replicas=3)
    decision = replicas.place(d, facts, footprint_bytes=GIB, now=NOW, failover_delay=DELAY)
    verdict = mdstatus.verdict(d, decision, [], {}, None)
    assert verdict.reason == cond.Reason.WAITING_FOR_CAPACITY
    assert verdict.message.startswith("0/3 ready, 1 unplaced: mac-mini-1, mac-mini-2: already ")
    assert "one per node" in verdict.message


def test_nodes_with_the_same_reason_share_one_entry_others_keep_theirs() -> None:
    request = placement.Request(replicas=4, footprint_bytes=4 * GIB, model=M)
    nodes = [
        view("a", unschedulable=True),
        view("b", unschedulable=True),
        view("c", used_bytes=14 * GIB),
        view("d"),
    ]
    decision = placement.place(request, nodes, (), now=NOW, failover_delay=DELAY)
    assert decision.missing == 3
    assert decision.rejection_summary() == (
        "a, b: cordoned (spec.unschedulable); "
        "c: needs 4.00 GiB, free 2.00 GiB of 16.00 GiB budget; "
        "d: already has a replica of this deployment (one per node)"
    )


def test_a_replica_held_on_a_draining_node_says_why_while_the_deployment_is_ready() -> None:
    """Drain with nowhere to go: the replica stays (make-before-break) and the deployment stays
    Ready, but its message says why the replica cannot leave (what `kubectl mlxfleet drain`
    shows while it waits)."""
    request = placement.Request(replicas=2, footprint_bytes=GIB, model=M)
    nodes = [view("mac-mini-1", draining=True, unschedulable=True), view("mac-mini-2")]
    decision = placement.place(
        request, nodes, ("mac-mini-1", "mac-mini-2"), now=NOW, failover_delay=DELAY
    )
    assert (decision.missing, decision.held) == (0, ("mac-mini-1",))
    summary = (
        "mac-mini-1: draining (spec.drain), its replica stays until another node can take it; "
        "mac-mini-2: already has a replica of this deployment (one per node)"
    )
    assert decision.rejection_summary() == summary
    d = md(replicas=2)
    ready = [
        mdep.PlacementStatus(node=n, phase=mdep.PlacementPhase.READY, ready=True, slot="s")
        for n in decision.nodes
    ]
    verdict = mdstatus.verdict(d, decision, ready, {}, None)
    assert (verdict.ready, verdict.reason) == (True, cond.Reason.READY)
    assert verdict.message == f"2/2 replicas ready; {summary}"
    # once another node has room, the replica moves and the message is plain again
    moved = placement.place(
        request, [*nodes, view("mac-mini-3")], ("mac-mini-1", "mac-mini-2"), now=NOW,
        failover_delay=DELAY,
    )  # fmt: skip
    assert (moved.held, moved.added) == ((), ("mac-mini-3",))
    assert mdstatus.verdict(d, moved, ready, {}, None).message == "2/2 replicas ready"


def test_an_empty_fleet_says_there_is_no_node() -> None:
    decision = placement.place(
        placement.Request(replicas=1, footprint_bytes=GIB, model=M), [], (), now=NOW,
        failover_delay=DELAY,
    )  # fmt: skip
    assert decision.missing == 1
    assert decision.rejection_summary() == placement.NO_NODES
    assert "mlxfleet-agent join" in placement.NO_NODES


def test_a_group_with_nowhere_to_go_names_the_nodes_other_groups_use() -> None:
    req = groupplacement.GroupRequest(
        groups=2, size=2, mode=groupplacement.Mode.TENSOR, weights_bytes=8 * GIB, kv_bytes=GIB,
        overhead_bytes=GIB, num_layers=8, num_kv_heads=8, model=M,
    )  # fmt: skip
    nodes = [placement.NodeView(name=n, budget_bytes=64 * GIB) for n in ("a", "b")]
    d = groupplacement.place_groups(req, nodes, [], now=NOW, failover_delay=DELAY)
    assert d.missing == 1
    assert d.rejection_summary() == "a, b: already runs a rank of this deployment (one per node)"


@settings(max_examples=300, deadline=None)
@given(request=requests_st, nodes=nodes_st, current=st.lists(names, max_size=4), data=st.data())
def test_a_missing_or_held_replica_always_has_a_reason_for_every_node(
    request: placement.Request,
    nodes: list[placement.NodeView],
    current: list[str],
    data: st.DataObject,
) -> None:
    """test_placement's random fleets, some nodes draining: whenever a replica found no node or
    stays on a draining node, the summary names every node with a reason."""
    draining = data.draw(st.lists(st.booleans(), min_size=len(nodes), max_size=len(nodes)))
    nodes = [dataclasses.replace(n, draining=d) for n, d in zip(nodes, draining, strict=True)]
    decision = placement.place(request, nodes, tuple(current), now=NOW, failover_delay=DELAY)
    if not decision.missing and not decision.held:
        return
    text = decision.rejection_summary()
    if not nodes:
        assert text == placement.NO_NODES
        return
    named = {n for entry in text.split("; ") for n in entry.split(": ", 1)[0].split(", ")}
    assert named == {n.name for n in nodes}

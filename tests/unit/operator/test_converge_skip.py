"""The convergence timer skips a deployment whose inputs did not change (issue 12: every
deployment was fully reconciled every 5 s with nothing changing): what counts as a change of the
agents' answers (`Fleet.version`), of the rest (`convergeskip.inputs`), and the resync; and the
memory a decision reserves in the shared fleet view until the agent lists the slot."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import kopf

from mlxfleet_agent import contract
from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import agent, fleet, fleetview, kube, kubeapi, runtime
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.handlers import convergeskip, indexes
from tests.unit.operator.builders import GIB, NOW, kopf_body, node, state

SLOT = contract.SlotStatus.model_validate(
    {"name": "s", "servedName": "m", "source": "file:///m", "phase": "Loading", "ready": False}
)


def _fleet() -> fleet.Fleet:
    f = fleet.Fleet(kube.Kube(kubeapi.Client(None)))
    f.entries["n1"] = fleetview.Entry(client=agent.AgentClient(agent.Credentials("http://n1", "t")))
    return f


def test_fleet_version_moves_only_when_a_decision_could() -> None:
    f = _fleet()
    f.record("n1", state(slots=[SLOT]), now=NOW)
    first = f.version
    f.record("n1", state(slots=[SLOT]), now=NOW + timedelta(seconds=5))
    busy = state(slots=[SLOT.model_copy(update={"in_flight": 3, "queued": 1})])
    busy = busy.model_copy(update={"counters": {"requests": 9.0}})
    busy.memory.available_bytes = 3 * GIB
    busy.disk.free_bytes = 1
    f.record("n1", busy, now=NOW + timedelta(seconds=10))
    later = busy.model_copy(update={"now": NOW + timedelta(seconds=12)})  # every real answer
    f.record("n1", later, now=NOW + timedelta(seconds=12))
    assert f.version == first  # the same answer, or only its counters / free memory / clock
    ready = SLOT.model_copy(update={"phase": contract.SlotPhase.READY, "ready": True})
    f.record("n1", state(slots=[ready]), now=NOW + timedelta(seconds=15))
    assert f.version == first + 1
    f.record("n1", state(slots=[ready], budget=8 * GIB), now=NOW + timedelta(seconds=20))
    assert f.version == first + 2
    f.slot_removed("n1", "s")
    assert f.version == first + 3


def test_runtime_remembers_inputs_until_resync() -> None:
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(),
        kube=cast(Any, None),
        fleet=cast(Any, None),
        publisher=cast(Any, None),
    )
    assert not rt.unchanged("u", ("a",), at=0.0, resync=60)
    rt.settle("u", ("a",), at=100.0)
    assert rt.unchanged("u", ("a",), at=159.0, resync=60)
    assert not rt.unchanged("u", ("b",), at=101.0, resync=60)
    assert not rt.unchanged("u", ("a",), at=160.0, resync=60)
    rt.settle("u", None, at=0)
    assert not rt.unchanged("u", ("a",), at=101.0, resync=60)


def _ready(
    name: str, rv: str, *, ready: bool = True, beat: int = 0, labels: dict[str, str] | None = None
) -> Any:
    n = node(name)
    n.metadata.resource_version = rv
    n.metadata.labels = labels or {}
    cond = {"type": "Ready", "status": "True" if ready else "False", "reason": "x", "message": ""}
    cond["lastTransitionTime"] = NOW.isoformat()
    status = {
        "conditions": [cond],
        "lastHeartbeatTime": (NOW + timedelta(seconds=beat)).isoformat(),
    }
    return n.model_copy(update={"status": n.status.model_validate(status)})


def test_inputs_change_with_nodes_agents_and_the_object_and_never_skip_a_lost_node() -> None:
    f = _fleet()
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(),
        kube=cast(Any, None),
        fleet=f,
        publisher=cast(Any, None),
    )
    memo = kopf.Memo({runtime.KEY: rt})
    body = kopf.Body(
        {"metadata": {"name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "7"}}
    )

    def idx(*nodes_: Any) -> indexes.Indexes:
        """The indexes after kopf saw these node objects (through the index function)."""
        found: dict[str, inode.InferenceNode] = {}
        for n in nodes_:
            wire = n.model_dump(mode="json", by_alias=True, exclude_none=True)
            found.update(indexes.inference_nodes(n.metadata.name, kopf.Body(wire), memo))
        return indexes.Indexes(
            nodes={k: [v] for k, v in found.items()},
            deployments={},
            plans={},
        )

    base = convergeskip.inputs(rt, body, idx(_ready("n1", "1"), _ready("n2", "1")))
    assert base is not None
    assert convergeskip.inputs(rt, body, idx(_ready("n1", "1"), _ready("n2", "1"))) == base
    # a status write of what decisions do not read (the heartbeat time): no reconcile
    beat = idx(_ready("n1", "1"), _ready("n2", "2", beat=5))
    assert convergeskip.inputs(rt, body, beat) == base
    labelled = _ready("n2", "2", beat=5, labels={"tier": "gpu"})  # what placement filters
    changed = convergeskip.inputs(rt, body, idx(_ready("n1", "1"), labelled))
    assert changed not in (None, base)
    f.version += 1
    assert convergeskip.inputs(rt, body, idx(_ready("n1", "1"), labelled)) != changed
    now = convergeskip.inputs(rt, body, idx(_ready("n1", "1"), labelled))
    one = idx(_ready("n1", "1"))  # n2 deleted: gone from the index, no event the view saw
    assert convergeskip.inputs(rt, body, one) != now
    lost = idx(_ready("n1", "1"), _ready("n2", "3", ready=False))
    assert convergeskip.inputs(rt, body, lost) is not None  # nothing of it there, no room there
    on_n2 = kopf_body({**body, "status": {"placements": [{"node": "n2"}]}})
    assert convergeskip.inputs(rt, on_n2, lost) is None  # failover is timed: always reconcile
    assert convergeskip.inputs(rt, on_n2, one) is not None  # the lost node is not indexed
    back = idx(_ready("n1", "1"), _ready("n2", "4"))
    assert convergeskip.inputs(rt, body, back) is not None
    rt.nodes.observe("n3", "1", ready=False)
    rt.nodes.forget("n3")  # deleted (the node delete handler)
    assert convergeskip.inputs(rt, body, back) is not None


def test_the_node_view_counts_no_scan_per_deployment() -> None:
    """At 100 x 300 the skip check read every node's Ready condition per deployment per tick
    (7-10 % of the operator's samples): it must read the kept view, not the nodes."""
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(),
        kube=cast(Any, None),
        fleet=_fleet(),
        publisher=cast(Any, None),
    )
    body = kopf.Body(
        {"metadata": {"name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "7"}}
    )

    class _Untouchable(dict[str, list[Any]]):
        def __iter__(self) -> Any:
            raise AssertionError("the skip check scanned every node")

        def values(self) -> Any:
            raise AssertionError("the skip check scanned every node")

    many = _Untouchable({f"n{i}": [_ready(f"n{i}", "1")] for i in range(50)})
    view = indexes.Indexes(
        nodes=many,
        deployments={},
        plans={},
    )
    assert convergeskip.inputs(rt, body, view) is not None


def test_a_decided_slot_counts_on_its_node_until_a_poll_lists_it() -> None:
    """Two decisions before the next poll must not promise the same memory (issue 12: 316 PUTs
    answered 507 at 100 x 300): `reserve` at decision time, gone once listed or refused."""
    clock = [0.0]
    f = fleet.Fleet(kube.Kube(kubeapi.Client(None)), clock=lambda: clock[0])
    f.entries["n1"] = fleetview.Entry(client=agent.AgentClient(agent.Credentials("http://n1", "t")))
    f.record("n1", state(), now=NOW)
    spec = contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "m"})
    before = f.version
    f.reserve("ns-a", dfacts.SlotRequest("n1", spec), 6 * GIB)
    assert f.version == before + 1  # a reconcile that waited rebuilds its view
    (seen,) = f.node_facts([node("n1")])
    assert dfacts.used_by_others(seen, "ns-b") == 6 * GIB  # the next decision sees it
    assert seen.slot("ns-a") is not None
    (own,) = f.node_facts([node("n1")], slot="ns-a")
    assert own.slot("ns-a") is None  # a deployment sees its replicas as the agents report them
    f.record("n1", state(), now=NOW)  # a poll sent before the PUT arrived: still reserved
    assert dfacts.used_by_others(f.node_facts([node("n1")])[0], "ns-b") == 6 * GIB
    listed = SLOT.model_copy(update={"name": "ns-a", "estimated_memory_bytes": 6 * GIB})
    f.record("n1", state(slots=[listed]), now=NOW)  # the agent lists it: counted once
    assert dfacts.used_by_others(f.node_facts([node("n1")])[0], "ns-b") == 6 * GIB
    f.record("n1", state(), now=NOW)
    assert dfacts.used_by_others(f.node_facts([node("n1")])[0], "ns-b") == 0
    f.reserve("ns-c", dfacts.SlotRequest("n1", spec), 4 * GIB)
    f.release("n1", "ns-c")  # the PUT was refused
    assert dfacts.used_by_others(f.node_facts([node("n1")])[0], "ns-b") == 0
    f.reserve("ns-d", dfacts.SlotRequest("n1", spec), 4 * GIB)
    clock[0] = fleetview.RESERVATION_S + 1
    f.record("n1", state(), now=NOW)  # never listed: stops counting
    assert dfacts.used_by_others(f.node_facts([node("n1")])[0], "ns-b") == 0


def test_a_placed_deployment_reads_only_its_nodes_and_an_unplaced_one_every_node() -> None:
    """At 500 x 1,000 one fleet-wide version made all 1,000 deployments reconcile whenever any
    agent's answer changed (35 % of samples): once all its replicas are placed, a deployment's
    skip key covers only the nodes that hold its slot. One that still needs a node keeps
    reading every node, so it re-places when a node frees memory or becomes Ready."""
    f = _fleet()
    f.entries["n2"] = fleetview.Entry(client=agent.AgentClient(agent.Credentials("http://n2", "t")))
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(),
        kube=cast(Any, None),
        fleet=f,
        publisher=cast(Any, None),
    )
    slot = naming.slot_name("ns", "d")
    mine = SLOT.model_copy(update={"name": slot})
    other = SLOT.model_copy(update={"name": "ns-other"})
    f.record("n1", state(slots=[mine]), now=NOW)
    f.record("n2", state(slots=[other]), now=NOW)
    for n, rv in (("n1", "1"), ("n2", "1")):
        rt.nodes.observe(n, rv, ready=True)
    idx = indexes.Indexes(
        nodes={"n1": [_ready("n1", "1")], "n2": [_ready("n2", "1")]},
        deployments={},
        plans={},
    )

    def body(replicas: int) -> kopf.Body:
        meta = {"name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
        return kopf_body({"metadata": meta, "spec": {"replicas": replicas}})

    placed, wanting = convergeskip.inputs(rt, body(1), idx), convergeskip.inputs(rt, body(2), idx)
    assert None not in (placed, wanting)
    # n2 frees its memory (its slot gone), its object changes, then it is lost and back
    f.record("n2", state(), now=NOW + timedelta(seconds=5))
    assert convergeskip.inputs(rt, body(1), idx) == placed  # placed on n1 only: skipped
    assert convergeskip.inputs(rt, body(2), idx) != wanting  # needs a node: reconciles
    wanting = convergeskip.inputs(rt, body(2), idx)
    rt.nodes.observe("n2", "2", ready=True)
    assert convergeskip.inputs(rt, body(1), idx) == placed
    assert convergeskip.inputs(rt, body(2), idx) != wanting
    rt.nodes.observe("n2", "3", ready=False)
    assert convergeskip.inputs(rt, body(1), idx) == placed  # a node it does not use
    # nothing of it on n2 and nothing can be placed there: no timed failover, reconciles once
    assert convergeskip.inputs(rt, body(2), idx) not in (None, wanting)
    rt.nodes.observe("n2", "4", ready=True)
    # its own node: the answer, the object, Ready
    ready = mine.model_copy(update={"phase": contract.SlotPhase.READY, "ready": True})
    f.record("n1", state(slots=[ready]), now=NOW + timedelta(seconds=10))
    assert convergeskip.inputs(rt, body(1), idx) not in (None, placed)
    placed = convergeskip.inputs(rt, body(1), idx)
    rt.nodes.observe("n1", "2", ready=True)
    assert convergeskip.inputs(rt, body(1), idx) not in (None, placed)
    rt.nodes.observe("n1", "3", ready=False)
    assert convergeskip.inputs(rt, body(1), idx) is None  # failover is timed
    rt.nodes.observe("n1", "4", ready=True)
    # a Failed replica is placed nowhere: the deployment reads every node again
    failed = mine.model_copy(update={"phase": contract.SlotPhase.FAILED})
    f.record("n1", state(slots=[failed]), now=NOW + timedelta(seconds=15))
    assert f.placed(slot) == {}
    everyone = convergeskip.inputs(rt, body(1), idx)
    f.record("n2", state(slots=[other]), now=NOW + timedelta(seconds=20))
    assert convergeskip.inputs(rt, body(1), idx) != everyone
    # a reservation counts as placed; a deleted node holds nothing
    spec = contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "m"})
    f.reserve(slot, dfacts.SlotRequest("n2", spec), GIB)
    assert list(f.placed(slot)) == ["n2"]
    f.record("n1", state(slots=[ready]), now=NOW + timedelta(seconds=25))
    assert list(f.placed(slot)) == ["n1", "n2"]


def test_a_placed_deployment_does_not_wake_for_its_neighbours_slots() -> None:
    """A settled deployment reads its own slot on its nodes and the rest of their answers, not
    the other slots there: at 500 x 1,000, other deployments' slots coming up on the same Macs
    were 5,432 of the 7,700 reconciles while converging."""
    f = _fleet()
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(),
        kube=cast(Any, None),
        fleet=f,
        publisher=cast(Any, None),
    )
    slot = naming.slot_name("ns", "d")
    mine = SLOT.model_copy(update={"name": slot})
    other = SLOT.model_copy(update={"name": "ns-other"})
    f.record("n1", state(slots=[mine]), now=NOW)
    rt.nodes.observe("n1", "1", ready=True)
    idx = indexes.Indexes(
        nodes={"n1": [_ready("n1", "1")]},
        deployments={},
        plans={},
    )
    meta = {"name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
    body = kopf_body({"metadata": meta, "spec": {"replicas": 1}})
    placed = convergeskip.inputs(rt, body, idx)
    assert placed is not None
    version = f.version
    f.record("n1", state(slots=[mine, other]), now=NOW + timedelta(seconds=5))  # a neighbour
    loading = other.model_copy(update={"phase": contract.SlotPhase.READY, "ready": True})
    f.record("n1", state(slots=[mine, loading]), now=NOW + timedelta(seconds=10))
    f.reserve(
        "ns-third",
        dfacts.SlotRequest(
            "n1", contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "m3"})
        ),
        GIB,
    )
    assert f.version > version  # a deployment still placing reads all of it
    assert convergeskip.inputs(rt, body, idx) == placed
    ready = mine.model_copy(update={"phase": contract.SlotPhase.READY, "ready": True})
    f.record("n1", state(slots=[ready, loading]), now=NOW + timedelta(seconds=15))  # its own
    own = convergeskip.inputs(rt, body, idx)
    assert own not in (None, placed)
    f.record("n1", state(slots=[ready, loading], budget=8 * GIB), now=NOW + timedelta(seconds=20))
    assert convergeskip.inputs(rt, body, idx) not in (None, own)  # the node's own part
    shrunk = convergeskip.inputs(rt, body, idx)
    f.slot_removed("n1", slot)  # deleted by us: placed nowhere now
    assert convergeskip.inputs(rt, body, idx) != shrunk


def test_all_facts_are_made_again_only_when_a_decision_could_differ() -> None:
    """A reconcile reads every node's facts; the list is the last one while no node object
    changed in what decisions read (the caller's key) and no answer changed (`version`), and
    a deployment never counts its own reservation as another's memory."""
    f = _fleet()
    f.record("n1", state(), now=NOW)
    asked: list[int] = []

    def nodes() -> list[Any]:
        asked.append(1)
        return [node("n1")]

    first = f.all_facts(nodes, key=1)
    assert f.all_facts(nodes, key=1) == first
    assert len(asked) == 1
    assert f.all_facts(nodes, key=2)[0].name == "n1"
    assert len(asked) == 2
    f.record("n1", state(budget=8 * GIB), now=NOW)  # an answer that changes decisions
    (seen,) = f.all_facts(nodes, key=2)
    assert len(asked) == 3
    assert dfacts.budget(seen) == 8 * GIB
    spec = contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "m"})
    f.reserve("ns-a", dfacts.SlotRequest("n1", spec), 6 * GIB)
    (other,) = f.all_facts(nodes, key=2)
    assert dfacts.used_by_others(other, "ns-b") == 6 * GIB
    (own,) = f.all_facts(nodes, key=2, slot="ns-a")
    assert own.slot("ns-a") is None
    assert own.reserved == frozenset({"ns-a"})
    assert len(asked) == 4  # the reservation moved the version once

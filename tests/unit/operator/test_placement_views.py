"""Placement views kept per node between reconciles, and deployments that wait for room (issue
12: at 500 x 1,000 the ModelDeployment handler was 44 % of the operator's samples, every
deployment not yet placed building a placement view of all 500 nodes at every tick, and
reconciling at every tick because any agent's answer anywhere moved its skip key)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import kopf
import pytest

from mlxfleet_agent import contract
from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import agent, fleet, fleetview, kube, kubeapi, runtime
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.core.deployment import replicas
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.core.fleet import nodeviews
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.handlers import convergeskip, indexes
from tests.unit.operator.builders import GIB, NOW, kopf_body, md, node, state

SPEC = contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "m"})


def _slot(name: str, gib: int, *, served: str | None = None) -> contract.SlotStatus:
    return contract.SlotStatus(
        name=name,
        served_name=served or name,
        source=f"file:///{name}",
        phase=contract.SlotPhase.READY,
        ready=True,
        estimated_memory_bytes=gib * GIB,
    )


def _fleet(names: list[str]) -> fleet.Fleet:
    f = fleet.Fleet(kube.Kube(kubeapi.Client(None)))
    for n in names:
        f.entries[n] = fleetview.Entry(
            client=agent.AgentClient(agent.Credentials(f"http://{n}", "t"))
        )
    return f


@pytest.mark.parametrize("seed", range(25))
def test_a_decision_on_kept_views_equals_one_on_views_made_for_it(seed: int) -> None:
    """The kept views are an optimisation only: the same decision as before, on random fleets
    where the deployment's own slot is listed, reserved or absent."""
    r = random.Random(seed)
    names = [f"n{i:02d}" for i in range(r.randrange(3, 12))]
    f = _fleet(names)
    objects = [
        node(n, ready=r.random() > 0.15, unschedulable=r.random() < 0.1)
        .model_copy(update={"metadata": node(n).metadata.model_copy(
            update={"labels": {"pool": r.choice("ab")}})})
        for n in names
    ]  # fmt: skip
    d = md(
        replicas=r.randrange(1, 4),
        placement={"nodeSelector": {"pool": "a"}} if r.random() < 0.3 else {},
        placements=[{"node": n, "phase": "Ready"} for n in r.sample(names, r.randrange(0, 3))],
    )
    slot = naming.slot_name("ns", "chat")
    for n in names:
        slots = [_slot(f"other-{n}-{i}", r.randrange(1, 6)) for i in range(r.randrange(0, 3))]
        if r.random() < 0.3:
            slots.append(_slot(slot, 2, served="chat"))
        if r.random() < 0.2:
            slots.append(_slot(f"clash-{n}", 1, served="chat"))
        f.record(n, state(slots=slots, budget=r.randrange(4, 24) * GIB), now=NOW)
    for n in r.sample(names, 2):
        f.reserve(r.choice([slot, "someone"]), dfacts.SlotRequest(n, SPEC), r.randrange(1, 4) * GIB)
    found = f.node_facts(objects, slot=slot)
    kw: dict[str, Any] = {"footprint_bytes": 2 * GIB, "now": NOW, "failover_delay": timedelta(0)}
    plain = replicas.place(d, found, **kw)
    kept = replicas.place(d, found, views=f.placement_views(objects, slot=slot), **kw)
    assert kept == plain


def test_views_and_facts_are_made_once_per_node_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reconciles of different deployments, nothing changed between them: no node's facts
    or view is made again; an answer, a reservation or a new node object makes that node's."""
    names = [f"n{i}" for i in range(20)]
    f = _fleet(names)
    for n in names:
        f.record(n, state(slots=[_slot(f"s-{n}", 1)]), now=NOW)
    objects = [node(n) for n in names]
    made: list[str] = []
    real = nodeviews.node_view

    def counting(fact: dfacts.NodeFacts, *, slot: str) -> Any:
        made.append(fact.name)
        return real(fact, slot=slot)

    monkeypatch.setattr(nodeviews, "node_view", counting)
    first = f.node_facts(objects, slot="a")
    assert len(f.placement_views(objects, slot="a")) == 20
    assert len(made) == 20
    again = f.node_facts(objects, slot="b")
    views = f.placement_views(objects, slot="b")
    assert len(made) == 20
    assert all(x is y for x, y in zip(first, again, strict=True))
    assert "n3" in views  # counts it
    assert "n3" not in f.placement_views(objects, slot="s-n3")
    f.record("n1", state(slots=[]), now=NOW)  # a decisive change
    f.reserve("c", dfacts.SlotRequest("n2", SPEC), GIB)
    objects[3] = node("n3")  # a new object (a watch event)
    f.placement_views(objects, slot="b")
    assert sorted(made[20:]) == ["n1", "n2", "n3"]
    (own,) = f.node_facts([objects[2]], slot="c")
    assert own.slot("c") is None  # its own reservation: the agents' word only
    assert own.reserved == {"c"}  # named as such (a replica placement keeps, `replicas.reserving`)
    (other,) = f.node_facts([objects[2]], slot="b")
    assert other.reserved == frozenset()
    assert other.slot("c") is not None  # another deployment's reservation: counted as used


def test_room_version_moves_only_for_room_that_fits_the_footprint() -> None:
    clock = [0.0]
    f = fleet.Fleet(kube.Kube(kubeapi.Client(None)), clock=lambda: clock[0])
    for n in ("n1", "n2"):
        f.entries[n] = fleetview.Entry(
            client=agent.AgentClient(agent.Credentials(f"http://{n}", "t"))
        )
    f.record("n1", state(budget=16 * GIB, slots=[_slot("a", 12)]), now=NOW)
    f.record("n2", state(budget=16 * GIB, slots=[_slot("b", 14)]), now=NOW)
    big, small = f.room_version(8 * GIB), f.room_version(2 * GIB)
    f.record("n1", state(budget=16 * GIB, slots=[_slot("a", 12), _slot("x", 2)]), now=NOW)
    f.reserve("y", dfacts.SlotRequest("n2", SPEC), GIB)  # less room: nobody wakes
    assert (f.room_version(8 * GIB), f.room_version(2 * GIB)) == (big, small)
    f.record("n1", state(budget=16 * GIB, slots=[_slot("a", 12)]), now=NOW)  # 4 GiB free
    assert f.room_version(8 * GIB) == big
    assert f.room_version(2 * GIB) > small
    small = f.room_version(2 * GIB)
    f.slot_removed("n1", "a")  # 16 GiB free
    assert f.room_version(8 * GIB) > big
    assert f.room_version(2 * GIB) > small
    big = f.room_version(8 * GIB)
    clock[0] = fleetview.RESERVATION_S + 1  # n2's reservation was never listed: it expires
    f.record("n2", state(budget=16 * GIB, slots=[_slot("b", 14)]), now=NOW)
    assert f.room_version(GIB) > small
    assert f.room_version(8 * GIB) == big
    f.reserve("z", dfacts.SlotRequest("n2", SPEC), GIB)
    before = f.room_version(GIB)
    f.release("n2", "z")  # the PUT was refused: the room is back
    assert f.room_version(GIB) > before


def test_a_deployment_waiting_for_room_skips_until_room_or_a_node_shows_up() -> None:
    """It reconciled, found no room (`Runtime.waiting`): other agents' answers that give no
    room for its footprint, and node status writes, do not reconcile it; room that fits it, a
    new node, a node back Ready, a relabelled node, and a NotReady node it is on do."""
    f = _fleet(["n1", "n2"])
    rt = runtime.Runtime(config=opsettings.OperatorSettings(), kube=None, fleet=f, publisher=None)  # type: ignore[arg-type]
    memo = kopf.Memo({runtime.KEY: rt})
    f.record("n1", state(budget=16 * GIB, slots=[_slot("a", 14)]), now=NOW)
    f.record("n2", state(budget=16 * GIB, slots=[_slot("b", 14)]), now=NOW)
    objects: dict[str, inode.InferenceNode] = {}

    def see(n: inode.InferenceNode, rv: str) -> None:
        n = n.model_copy(
            update={"metadata": n.metadata.model_copy(update={"resource_version": rv})}
        )
        wire = n.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert n.metadata.name is not None
        objects.update(indexes.inference_nodes(n.metadata.name, kopf_body(wire), memo))

    def idx() -> indexes.Indexes:
        return indexes.Indexes(
            nodes={k: [v] for k, v in objects.items()},
            deployments={},
            plans={},
        )

    see(node("n1"), "1")
    see(node("n2"), "1")
    meta = {"name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
    body = kopf_body({"metadata": meta, "spec": {"replicas": 1}})
    rt.objects.of("u").waiting = 8 * GIB
    key = convergeskip.inputs(rt, body, idx())
    assert key is not None
    f.record("n1", state(budget=16 * GIB, slots=[_slot("a", 10)]), now=NOW)  # 6 GiB: not enough
    see(node("n1"), "2")  # a status write (heartbeat, slot phases)
    assert convergeskip.inputs(rt, body, idx()) == key
    f.record("n2", state(budget=16 * GIB, slots=[]), now=NOW)  # 16 GiB free: it fits now
    assert convergeskip.inputs(rt, body, idx()) not in (None, key)
    changes: tuple[tuple[Callable[[], None], bool], ...] = (
        (lambda: see(node("n3"), "1"), True),  # a new node
        (lambda: see(node("n1", ready=False), "3"), False),  # lost: it is not there, no room
        (lambda: see(node("n1"), "4"), True),  # back Ready
        (lambda: see(node("n2", unschedulable=True), "2"), True),  # cordoned (any spec change)
        (lambda: see(node("n2", unschedulable=True), "3"), False),  # a status write
    )
    for change, wakes in changes:
        key = convergeskip.inputs(rt, body, idx())
        change()
        after = convergeskip.inputs(rt, body, idx())
        assert after is not None
        assert (after != key) is wakes
    see(node("n2", ready=False, unschedulable=True), "4")
    assert convergeskip.inputs(rt, body, idx()) == after  # it is not on n2
    on_n2 = kopf_body({**body, "status": {"placements": [{"node": "n2"}]}})
    assert convergeskip.inputs(rt, on_n2, idx()) is None  # it is: failover is timed
    rt.objects.of("u").waiting = None  # not waiting (placed, sized, refused): all answers count
    everyone = convergeskip.inputs(rt, body, idx())
    f.record("n1", state(budget=16 * GIB, slots=[_slot("a", 10), _slot("c", 1)]), now=NOW)
    assert convergeskip.inputs(rt, body, idx()) != everyone

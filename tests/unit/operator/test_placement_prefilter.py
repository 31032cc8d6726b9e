"""Placement's prefilter (issue 12: at 500 nodes x 1,000 deployments every reconcile walked all
500 nodes in `placement.place`, 9 % of the operator's samples): the fleet's kept views indexed
by label, cached model and free memory (`core.deployment.candidates`), so a reconcile decides
on the nodes that may take its replicas. The index is an optimisation only: over random fleets
that change between decisions, the decision with it equals the decision without it."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import agent, fleetview
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.core.deployment import candidates, intent, preemption, replicas
from mlxfleet_operator.core.fleet import facts, placement
from mlxfleet_operator.core.kit import naming
from tests.unit.operator.builders import GIB, NOW, md, node, state
from tests.unit.operator.test_placement_views import _fleet, _slot

SPEC = contract.SlotSpec.model_validate({"source": "file:///m", "servedName": "m"})
SLOT = naming.slot_name("ns", "chat")
MODEL = "file:///models/a"  # builders.md's source


def _object(r: random.Random, name: str) -> inode.InferenceNode:
    labels = {"pool": r.choice("ab"), "size": r.choice(["small", "large"])}
    if r.random() < 0.5:
        labels["zone"] = r.choice("xy")
    base = node(
        name,
        ready=r.random() > 0.15,
        unschedulable=r.random() < 0.08,
        drain=r.random() < 0.05,
    )
    status = base.status
    if r.random() < 0.1:  # memory pressure: no new replica there
        pressed = cond.Condition(
            type="MemoryPressure",
            status=cond.ConditionStatus.TRUE,
            reason="MemoryWarn",
            message="agent reports memory pressure warn",
            last_transition_time=NOW,
        )
        status = status.model_copy(update={"conditions": [*status.conditions, pressed]})
    heat = r.random()
    if heat < 0.35:  # warm (fair: placement prefers cooler nodes) or hot (no new replica)
        hot = heat < 0.08
        warm = cond.Condition(
            type="ThermalPressure",
            status=cond.ConditionStatus.TRUE if hot else cond.ConditionStatus.FALSE,
            reason="ThermalSerious" if hot else "ThermalFair",
            message=f"agent reports thermal pressure {'serious' if hot else 'fair'}",
            last_transition_time=NOW,
        )
        status = status.model_copy(update={"conditions": [*status.conditions, warm]})
    meta = base.metadata.model_copy(update={"labels": labels})
    return base.model_copy(update={"metadata": meta, "status": status})


def _answer(r: random.Random, name: str) -> contract.AgentState:
    slots = [_slot(f"other-{name}-{i}", r.randrange(1, 6)) for i in range(r.randrange(0, 4))]
    if r.random() < 0.25:
        slots.append(_slot(SLOT, 2, served="chat"))
    if r.random() < 0.1:
        slots.append(_slot(f"clash-{name}", 1, served="chat"))
    cached = (
        [contract.CachedModel(id="a", source=MODEL, size_bytes=GIB)] if r.random() < 0.3 else []
    )
    # budgets on a coarse grid: ties on free memory are common (placement breaks them by name)
    answer = state(slots=slots, cached=cached, budget=r.choice([4, 8, 12, 16, 24]) * GIB)
    if r.random() < 0.1:
        answer = answer.model_copy(
            update={"engines": [contract.EngineInfo(name="mlx-lm", available=False, reason="x")]}
        )
    return answer


def _deployment(r: random.Random, names: list[str]) -> Any:
    selector = r.choice(
        [{}, {}, {"pool": "a"}, {"size": "large"}, {"pool": "b", "zone": "x"}, {"zone": "y"}]
    )
    spec: dict[str, Any] = {"strategy": r.choice(["Spread", "BinPack"])}
    if selector:
        spec["nodeSelector"] = selector
    replicas = r.randrange(0, 5)
    if r.random() < 0.1 and len(names) >= replicas:  # at least spec.replicas of them
        spec["nodes"] = r.sample(names, min(len(names), replicas + r.randrange(0, 3)))
    placed = [
        {"node": n, "phase": r.choice(["Ready", "Ready", "Removing"])}
        for n in r.sample(names, r.randrange(0, 4))
    ]
    return md(replicas=replicas, placement=spec, placements=placed)


def _nomination(r: random.Random, name: str) -> preemption.Nomination:
    """A preemptor promised node `name`, evicting the deployment's own replica there or not."""
    low = preemption.Tenant("ns", "chat")
    evictions = (preemption.Eviction(name, SLOT, low, 2 * GIB),) if r.random() < 0.5 else ()
    by = preemption.Tenant("ns", "preemptor", priority=5)
    return preemption.Nomination(name, by, "preemptor", r.randrange(1, 6) * GIB, evictions, NOW)


def _same(with_index: placement.Decision, without: placement.Decision) -> None:
    """Equal; a decision that places every replica may list fewer rejections (each one the
    same as without the index)."""
    if without.missing:
        assert with_index == without
        return
    assert dataclasses.replace(with_index, rejections=()) == dataclasses.replace(
        without, rejections=()
    )
    assert set(with_index.rejections) <= set(without.rejections)


@pytest.mark.parametrize("seed", range(60))
def test_a_decision_on_the_prefilter_equals_one_on_every_node(seed: int) -> None:
    """Random fleets (labels, selectors, both strategies, cached weights, engines, served-name
    clashes, cordoned, draining, NotReady and memory-pressed nodes, the deployment's own slot
    listed, reserved or absent, explicit nodes, nodes promised to a preemptor, nodes the
    deployment must leave), changed between decisions (new answers, reservations, new node
    objects, nodes removed and added): the index follows every change."""
    r = random.Random(seed)
    names = [f"n{i:03d}" for i in range(r.randrange(5, 60))]
    f = _fleet(names)
    objects = {n: _object(r, n) for n in names}
    for n in names:
        f.record(n, _answer(r, n), now=NOW)
    checked = 0
    for _round in range(6):
        for n in r.sample(sorted(objects), min(len(objects), r.randrange(0, 6))):
            f.record(n, _answer(r, n), now=NOW)
        for n in r.sample(sorted(objects), min(len(objects), 2)):
            request = facts.SlotRequest(n, SPEC)
            f.reserve(r.choice([SLOT, "someone"]), request, r.randrange(1, 4) * GIB)
        for n in r.sample(sorted(objects), min(len(objects), r.randrange(0, 3))):
            objects[n] = _object(r, n)
        promised = r.sample(sorted(objects), min(len(objects), r.randrange(0, 3)))
        f.nominate("preemptor", [_nomination(r, n) for n in promised])
        if r.random() < 0.3 and len(objects) > 3:
            del objects[r.choice(sorted(objects))]  # gone from the cluster, not forgotten yet
        if r.random() < 0.3:
            added = f"n{len(names):03d}"
            names.append(added)
            f.entries[added] = fleetview.Entry(
                client=agent.AgentClient(agent.Credentials(f"http://{added}", "t"))
            )
            f.record(added, _answer(r, added), now=NOW)
            objects[added] = _object(r, added)
        found_nodes = [objects[n] for n in sorted(objects)]
        for _ in range(5):
            d = _deployment(r, sorted(objects))
            found = f.node_facts(found_nodes, slot=SLOT)
            kw: dict[str, Any] = {
                "footprint_bytes": r.randrange(1, 10) * GIB,
                "now": NOW + timedelta(seconds=r.choice([0, 30])),
                "failover_delay": timedelta(seconds=r.choice([0, 60])),
                "leave": dict.fromkeys(r.sample(sorted(objects), r.randrange(0, 3)), "evicted"),
            }
            without = replicas.place(d, found, **kw)
            index = f.placement_index(found)
            _same(replicas.place(d, found, index=index, **kw), without)
            checked += 1
    assert checked == 30


def test_the_shortlist_of_a_large_fleet_is_small() -> None:
    """500 nodes, one replica that fits on most: the decision considers a handful of nodes
    (without the index: all 500), and it is the same decision."""
    r = random.Random(7)
    names = [f"mac-{i:04d}" for i in range(500)]
    f = _fleet(names)
    objects = []
    for i, n in enumerate(names):
        base = node(n)
        labels = {"pool": f"p{i % 4}"}
        objects.append(
            base.model_copy(
                update={"metadata": base.metadata.model_copy(update={"labels": labels})}
            )
        )
        slots = [_slot(f"s-{n}-{k}", r.randrange(1, 8)) for k in range(r.randrange(0, 4))]
        f.record(n, state(slots=slots, budget=r.choice([8, 16, 44, 92, 140]) * GIB), now=NOW)
    found = f.node_facts(objects, slot=SLOT)
    index = f.placement_index(found)
    seen: list[int] = []
    real = placement.place

    def counting(request: placement.Request, nodes: Any, *a: Any, **kw: Any) -> Any:
        seen.append(len(nodes))
        return real(request, nodes, *a, **kw)

    kw: dict[str, Any] = {"footprint_bytes": 4 * GIB, "now": NOW, "failover_delay": timedelta(0)}
    for spec in ({}, {"nodeSelector": {"pool": "p2"}}, {"strategy": "BinPack"}):
        d = md(replicas=2, placement=spec)
        without = replicas.place(d, found, **kw)
        seen.clear()
        placement.place = counting
        try:
            with_index = replicas.place(d, found, index=index, **kw)
        finally:
            placement.place = real
        assert len(with_index.nodes) == 2
        _same(with_index, without)
        assert seen == [2], (spec, seen)


def test_a_decision_that_leaves_a_replica_unplaced_names_every_nodes_reason() -> None:
    """No room anywhere: the decision is taken on every node, so the status's message lists
    each node's reason (the same decision as without the index)."""
    names = [f"n{i}" for i in range(8)]
    f = _fleet(names)
    objects = [node(n) for n in names]
    for n in names:
        f.record(n, state(slots=[_slot(f"s-{n}", 12)], budget=16 * GIB), now=NOW)
    found = f.node_facts(objects, slot=SLOT)
    kw: dict[str, Any] = {"footprint_bytes": 8 * GIB, "now": NOW, "failover_delay": timedelta(0)}
    d = md(replicas=1)
    with_index = replicas.place(d, found, index=f.placement_index(found), **kw)
    assert with_index == replicas.place(d, found, **kw)
    assert with_index.missing == 1
    assert [r.node for r in with_index.rejections] == names


def test_the_intent_decides_the_same_with_the_index() -> None:
    """What the handler calls (`intent.intent` with the fleet's index)."""
    r = random.Random(3)
    names = [f"n{i:02d}" for i in range(30)]
    f = _fleet(names)
    objects = [_object(r, n) for n in names]
    for n in names:
        f.record(n, _answer(r, n), now=NOW)
    found = f.node_facts(objects, slot=SLOT)
    for _ in range(20):
        d = _deployment(r, names)
        kw: dict[str, Any] = {
            "plan": None,
            "footprint_bytes": r.randrange(1, 6) * GIB,
            "now": NOW,
            "failover_delay": timedelta(0),
        }
        plain = intent.intent(d, found, **kw)
        indexed = intent.intent(d, found, index=f.placement_index(found), **kw)
        _same(indexed.decision, plain.decision)
        assert dataclasses.replace(indexed, decision=plain.decision) == plain


def test_the_index_after_puts_and_drops_equals_one_built_afresh() -> None:
    r = random.Random(11)
    kept = candidates.NodeIndex()
    views: dict[str, placement.NodeView] = {}
    for _ in range(400):
        name = f"n{r.randrange(40)}"
        if r.random() < 0.2:
            kept.drop(name)
            views.pop(name, None)
            continue
        view = placement.NodeView(
            name=name,
            labels={"pool": r.choice("abc")},
            budget_bytes=r.choice([8, 16]) * GIB,
            used_bytes=r.randrange(0, 8) * GIB,
        )
        kept.put(view, frozenset({f"s{r.randrange(3)}"}))
        views[name] = view
    fresh = candidates.NodeIndex()
    for view in views.values():
        fresh.put(view, kept_slots(kept, view.name))
    assert vars(kept) == vars(fresh)


def kept_slots(index: candidates.NodeIndex, name: str) -> frozenset[str]:
    return frozenset(s for s in ("s0", "s1", "s2") if name in index.counting(s))

"""Memory as the scheduler sees it (a loading slot counts in full, one that runs no backend
counts nothing; the InferenceNode's free memory), a node under memory pressure takes no new
replica and says why, the fleet's nominations (what a preemptor is promised, and who must
leave), and what a deployment's Ready condition says while it preempts or is preempted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.adapters import agent, fleet, fleetview, kube, kubeapi
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.core.deployment import evictions, preemption, replicas
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.core.fleet import nodeviews, placement
from mlxfleet_operator.core.kit import heartbeat
from mlxfleet_operator.core.node import status as nodestatus
from mlxfleet_operator.kubectl_plugin import render
from tests.unit.operator.builders import GIB, NOW, SHAPE, A, fact, md, node, state

SPEC = contract.SlotSpec.model_validate({"source": A, "servedName": "m", "contextLength": 1024})
CACHED = contract.CachedModel(id="a", source=A, size_bytes=GIB, shape=SHAPE)
ESTIMATE = sizing.estimate(
    weights_bytes=GIB, shape=SHAPE, context_length=1024, max_concurrency=4, kv_bits=None
).total_bytes


def slot(phase: str, reported: int | None, **spec: Any) -> contract.SlotStatus:
    return contract.SlotStatus(
        name="s",
        served_name="m",
        source=A,
        phase=contract.SlotPhase(phase),
        ready=phase == "Ready",
        estimated_memory_bytes=reported,
        spec=SPEC.model_copy(update=spec),
    )


@pytest.mark.parametrize(
    ("observed", "counted"),
    [
        pytest.param(slot("Ready", 3 * GIB), 3 * GIB, id="serving-what-it-holds"),
        pytest.param(slot("Downloading", 0), ESTIMATE, id="downloading-in-full"),
        pytest.param(slot("Pending", None), ESTIMATE, id="pending-in-full"),
        pytest.param(slot("Loading", GIB, memory_bytes=5 * GIB), 5 * GIB, id="loading-override"),
        pytest.param(slot("Warming", 7 * GIB), 7 * GIB, id="warming-holds-more"),
        pytest.param(slot("Failed", 0), 0, id="no-backend-nothing"),
    ],
)
def test_a_loading_slot_counts_in_full_one_without_a_backend_counts_nothing(
    observed: contract.SlotStatus, counted: int
) -> None:
    assert dfacts.held_bytes(observed, [CACHED]) == counted


def test_a_loading_slot_whose_size_no_node_knows_counts_what_it_holds() -> None:
    assert dfacts.held_bytes(slot("Downloading", 0), []) == 0


def test_a_rank_counts_its_share_the_agent_reports() -> None:
    rank = contract.SlotSpec.model_validate(
        {
            "source": A,
            "servedName": "m",
            "shard": {"group": "g", "rank": 1, "worldSize": 2, "hosts": ["a:1", "b:2"]},
        }
    )
    observed = slot("Loading", GIB).model_copy(update={"spec": rank})
    assert dfacts.held_bytes(observed, [CACHED]) == GIB


def test_the_node_shows_free_memory_as_placement_counts_it() -> None:
    st = state(slots=[slot("Downloading", 0)], cached=[CACHED], budget=16 * GIB)
    got = nodestatus.status(
        node("n1"), nodestatus.Poll(st), heartbeat.Health(ready=True), threshold=3, now=NOW
    )
    assert got.memory is not None
    assert got.memory.used_bytes == ESTIMATE
    assert got.memory.free_bytes == 16 * GIB - ESTIMATE
    assert got.memory.free is not None
    assert got.memory.free.endswith("Gi")
    full = state(slots=[slot("Ready", 20 * GIB)], budget=16 * GIB)
    over = nodestatus.status(
        node("n1"), nodestatus.Poll(full), heartbeat.Health(ready=True), threshold=3, now=NOW
    )
    assert over.memory is not None
    assert over.memory.free_bytes == 0


def _pressured(level: str, reason: str) -> Any:
    st = state(pressure=level)
    return st.model_copy(
        update={"memory": st.memory.model_copy(update={"pressure_reason": reason})}
    )


def test_memory_pressure_says_the_reading_and_keeps_it_while_the_level_stays() -> None:
    n = node("n1")
    first = nodestatus.status(
        n,
        nodestatus.Poll(_pressured("warn", "PSI memory some avg10=23.00% full avg10=1.00%")),
        heartbeat.Health(ready=True),
        threshold=3,
        now=NOW,
    )
    got = cond.find(first.conditions, cond.ConditionType.MEMORY_PRESSURE)
    assert got is not None
    assert got.status is cond.ConditionStatus.TRUE
    assert got.reason == "MemoryWarn"
    assert "PSI memory some avg10=23.00%" in got.message
    assert "no new replicas are placed here until it clears" in got.message
    again = nodestatus.status(
        n.model_copy(update={"status": first}),
        nodestatus.Poll(_pressured("warn", "PSI memory some avg10=31.00% full avg10=1.00%")),
        heartbeat.Health(ready=True),
        threshold=3,
        now=NOW + timedelta(seconds=5),
    )
    assert again.conditions == first.conditions  # a moving reading rewrites nothing


def _pressured_fact(name: str) -> dfacts.NodeFacts:
    n = node(name)
    status = nodestatus.status(
        n,
        nodestatus.Poll(_pressured("critical", "2.0% of memory available")),
        heartbeat.Health(ready=True),
        threshold=3,
        now=NOW,
    )
    return dfacts.NodeFacts(
        node=n.model_copy(update={"status": status}), state=state(), endpoint="x"
    )


def test_a_node_under_memory_pressure_takes_no_new_replica_and_keeps_its_own() -> None:
    d = md(replicas=1)
    facts = [_pressured_fact("n1")]
    decision = replicas.place(
        d, facts, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(seconds=15)
    )
    assert decision.missing == 1
    (rejection,) = decision.rejections
    assert rejection.reason == placement.Reason.MEMORY_PRESSURE
    assert "2.0% of memory available" in rejection.message
    placed = md(replicas=1, placements=[{"node": "n1", "phase": "Ready", "ready": True}])
    kept = replicas.place(
        placed, facts, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(seconds=15)
    )
    assert kept.kept == ("n1",)
    assert kept.missing == 0


def test_every_pressure_of_the_table_is_a_reason_placement_gives() -> None:
    """Thermal pressure joins as one more (condition, reason) entry: each entry's reason is a
    placement reason that is not static (it clears by itself)."""
    for kind, reason in nodeviews.PRESSURES:
        assert isinstance(kind, cond.ConditionType)
        assert reason not in placement.STATIC


def _fleet() -> fleet.Fleet:
    f = fleet.Fleet(kube.Kube(kubeapi.Client(None)))
    f.entries["n1"] = fleetview.Entry(client=agent.AgentClient(agent.Credentials("http://n1", "t")))
    return f


def test_a_nomination_promises_the_node_to_the_preemptor_alone() -> None:
    f = _fleet()
    low = slot("Ready", 4 * GIB).model_copy(update={"name": "slot-low"})
    f.record("n1", state(slots=[low], budget=8 * GIB), now=NOW)
    victim = preemption.Tenant("ns", "low")
    nomination = preemption.Nomination(
        "n1",
        preemption.Tenant("ns", "high", priority=5),
        "slot-high",
        6 * GIB,
        (preemption.Eviction("n1", "slot-low", victim, 4 * GIB),),
        NOW,
    )
    before = f.version
    f.nominate("slot-high", [nomination])
    assert f.version > before  # the nodes' deployments reconcile
    (seen,) = f.node_facts([node("n1")])
    assert dfacts.used_by_others(seen, "slot-other") == 6 * GIB  # 4 held + 2 promised
    assert dfacts.used_by_others(seen, "slot-high") == 4 * GIB  # its own promise is its own
    assert dfacts.used_by_others(seen, "slot-low") == 2 * GIB  # the victim is not squeezed
    assert f.evicting("slot-low") == [nomination]
    assert f.evicting("slot-other") == []
    f.record("n1", state(budget=8 * GIB), now=NOW)  # the victim left
    (seen,) = f.node_facts([node("n1")])
    assert dfacts.used_by_others(seen, "slot-other") == 6 * GIB
    f.nominate("slot-high", [])
    assert f.nominations() == []
    (seen,) = f.node_facts([node("n1")])
    assert dfacts.used_by_others(seen, "slot-other") == 0


def _verdict(standing: evictions.Standing, missing: int = 1) -> Any:
    d = md(replicas=1)
    decision = placement.Decision(
        nodes=(),
        kept=(),
        added=(),
        dropped=(),
        missing=missing,
        fits_nowhere=False,
        rejections=(placement.Rejection("n1", placement.Reason.MEMORY, "needs 6, free 2"),),
    )
    return mdstatus.verdict(d, decision, [], {}, None, standing=standing)


def test_the_ready_condition_says_preempting_and_preempted() -> None:
    waiting = _verdict(evictions.Standing(waiting="evicting ns/low (priority 0) on n1"))
    assert (waiting.ready, waiting.reason, waiting.reconciling) == (False, "Preempting", True)
    assert waiting.message.startswith("0/1 ready, 1 unplaced: evicting ns/low (priority 0) on n1")
    evicted = _verdict(evictions.Standing(evicted="replica on n1 evicted for ns/high"))
    assert (evicted.reason, evicted.reconciling) == ("Preempted", True)
    assert "replica on n1 evicted for ns/high" in evicted.message
    plain = _verdict(evictions.Standing())
    assert plain.reason == "WaitingForCapacity"


def test_status_carries_both_records() -> None:
    record = {"node": "n1", "deployment": "ns/high", "priority": 5, "at": NOW.isoformat()}
    d = md(replicas=1).model_copy(deep=True)
    d.status.preempted_by = [d.status.model_validate({"preemptedBy": [record]}).preempted_by[0]]
    decision = placement.Decision((), (), (), (), (), 1, False)
    result = mdstatus.status(
        d,
        decision=decision,
        facts={"n1": fact("n1")},
        desired={},
        outcomes={},
        plan=None,
        footprint_bytes=GIB,
        endpoint="http://x",
        now=NOW,
    )
    assert result.status.preempted_by == d.status.preempted_by  # kept when not decided anew
    wire = result.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["preemptedBy"][0]["deployment"] == "ns/high"


def test_the_status_screen_lists_preemptions_and_pressure() -> None:
    deployment = {
        "metadata": {"namespace": "ns", "name": "low"},
        "spec": {"replicas": 1, "model": {"source": A}},
        "status": {
            "preemptedBy": [
                {
                    "node": "n1",
                    "deployment": "ns/high",
                    "priority": 5,
                    "at": "2026-01-01T00:00:00Z",
                    "backoffUntil": "2026-01-01T00:00:30Z",
                }
            ],
            "preempting": [
                {
                    "node": "n2",
                    "deployment": "ns/lower",
                    "priority": -1,
                    "at": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }
    pressured = {
        "metadata": {"name": "n1"},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "MemoryPressure", "status": "True", "reason": "MemoryWarn"},
            ]
        },
    }
    text = render.status_screen([pressured], [deployment], [])
    assert "preempted by ns/high (priority 5) on n1 at 2026-01-01T00:00:00Z" in text
    assert "back-off until 2026-01-01T00:00:30Z" in text
    assert "preempting ns/lower (priority -1) on n2" in text
    assert "pressure:MemoryWarn" in text

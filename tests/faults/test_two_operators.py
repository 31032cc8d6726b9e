"""Scenario 7: two operators without leader election (a misconfiguration).

- A `--standalone` operator started beside elected replicas refuses to run (it would act at the
  same time as their leader).
- Two `--standalone` operators side by side (nothing can stop that): the damage is bounded. The
  agent API is declarative and the SwapPlan's progress lives in its status, so both drive the
  same plan to the same end: each node is swapped exactly once, never two swaps of one slot at
  once, one SwapPlan, no extra slot, no failed request. What doubles: agent polls, status
  writes and Events (docs/faults.md).
- The agent itself serialises swaps of one slot: two different models PUT at the same moment
  give two swaps one after the other, never overlapping, ending on the last one asked for.
"""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import Agent, Agents, wait_for
from tests.e2e.loadgen import DiscoveredLoad, fixed
from tests.faults.conftest import Operators
from tests.faults.steps import Fleet, assert_swapped_cleanly, swap_during

pytestmark = [pytest.mark.faults, pytest.mark.cluster, pytest.mark.timeout(600)]

EXIT_LED = 3


def when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def assert_sequential(records: list[dict[str, Any]]) -> None:
    """Swap records (newest first) never overlap: each started after the previous finished."""
    ordered = sorted(records, key=lambda r: when(r["startedAt"]))
    assert all(r["finishedAt"] for r in ordered), ordered
    for earlier, later in itertools.pairwise(ordered):
        assert when(later["startedAt"]) >= when(earlier["finishedAt"]), (earlier, later)


def test_standalone_refuses_beside_an_elected_leader(operators: Operators) -> None:
    operators.start("op-1")
    operators.leader()
    lone = operators.start("lone", standalone=True)
    lone.supervised = False
    assert lone.proc is not None
    assert lone.proc.wait(timeout=30) == EXIT_LED
    assert "refusing to run --standalone: op-1_" in lone.log()
    assert operators.replicas["op-1"].alive()


@pytest.mark.mlx
def test_two_standalone_operators_drive_one_plan_without_damage(
    fleet: Fleet, figures: dict[str, object], model_a: Path, model_b: Path
) -> None:
    e2e = fleet.e2e
    pool = [fleet.agents.start("a"), fleet.agents.start("b")]
    nodes = [e2e.register(agent) for agent in pool]
    fleet.operators.start("op-1", standalone=True)
    fleet.deploy("chat", model_a)
    fleet.operators.start("op-2", standalone=True)
    time.sleep(3)  # both operators reconcile the same objects
    swap = swap_during(fleet, model_b)
    events = json.loads(
        e2e.kubectl("get", "events", "-A", "-o", "json", "--field-selector", "reason=NodeReady")
    )["items"]
    figures.update(
        scenario="7 two operators without election",
        plan_s=round(swap.completed - swap.injected, 2),
        requests_ok=swap.load.ok,
        requests_failed=swap.load.failed,
        node_ready_events=sum(1 for e in events if e["involvedObject"]["name"] in nodes),
    )
    assert_swapped_cleanly(fleet, swap, pool, model_b)
    slot = naming.slot_name(e2e.namespace, "chat")
    for agent in pool:
        assert_sequential(agent.swaps(slot))
    assert [p["metadata"]["name"] for p in e2e.list("swapplans")] == [swap.plan]
    assert all(r.alive() for r in fleet.operators.replicas.values())


def put_slot(agent: Agent, slot: str, source: Path) -> httpx.Response:
    return httpx.put(
        f"{agent.url}/v1/slots/{slot}",
        json={"source": f"file://{source}", "servedName": "chat", "contextLength": 1024},
        headers={"Authorization": f"Bearer {agent.token}"},
        timeout=60,
    )


@pytest.mark.mlx
def test_agent_serialises_concurrent_swaps_of_one_slot(
    agents: Agents, figures: dict[str, object], model_a: Path, model_b: Path
) -> None:
    agent = agents.start("solo")
    third = model_a.parent / f"model-c-{agent.control_port}"
    shutil.copytree(model_b, third)
    assert put_slot(agent, "chat", model_a).status_code in (200, 202)
    wait_for(
        "slot ready",
        lambda: any(s["name"] == "chat" and s["ready"] for s in agent.state()["slots"]),
    )
    with DiscoveredLoad(fixed(agent.data_url), "chat", workers=2, timeout=30) as load:
        time.sleep(1)
        barrier = threading.Barrier(2)
        answers: list[int] = []

        def race(source: Path) -> None:
            barrier.wait()
            answers.append(put_slot(agent, "chat", source).status_code)

        racers = [threading.Thread(target=race, args=(m,)) for m in (model_b, third)]
        for t in racers:
            t.start()
        for t in racers:
            t.join()

        def settled() -> list[dict[str, Any]] | None:
            records = agent.swaps("chat")
            slot = next(s for s in agent.state()["slots"] if s["name"] == "chat")
            done = records and all(r["outcome"] for r in records) and slot["ready"]
            return records if done and records[0]["toSource"] == slot["source"] else None

        records = wait_for("swaps settled", settled, timeout=180)
        time.sleep(1)
    figures.update(
        scenario="7 agent: two different models PUT at once",
        swaps=len(records),
        requests_ok=load.ok,
        requests_failed=load.failed,
    )
    assert all(a in (200, 202) for a in answers), answers
    assert 1 <= len(records) <= 2, records
    assert_sequential(records)
    final = next(s for s in agent.state()["slots"] if s["name"] == "chat")
    assert final["source"] == records[0]["toSource"]
    assert final["source"] in (f"file://{model_b}", f"file://{third}")
    assert load.failed == 0, load.errors[:5]

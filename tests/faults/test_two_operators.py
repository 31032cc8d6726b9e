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

from mlxfleet_operator.core import naming
from tests.e2e.conftest import E2E, Agent, Agents, is_true, wait_for
from tests.e2e.loadgen import DiscoveredLoad, fixed
from tests.faults.conftest import Operators, endpoint_urls, plan_status, slots_everywhere, traffic
from tests.support.kubeapi import AdminApi

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
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    admin: AdminApi,
    figures: dict[str, object],
    model_a: Path,
    model_b: Path,
) -> None:
    pool = [agents.start("a"), agents.start("b")]
    nodes = [e2e.register(agent) for agent in pool]
    operators.start("op-1", standalone=True)
    e2e.apply(e2e.deployment("chat", model_a))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    operators.start("op-2", standalone=True)
    wait_for("both endpoints", lambda: len(endpoint_urls(admin, e2e.namespace, "chat")) == 2)
    with traffic(admin, e2e, "chat") as load:
        time.sleep(3)  # both operators reconcile the same objects
        e2e.apply(e2e.deployment("chat", model_b))
        plan = str(
            wait_for("SwapPlan", lambda: e2e.get("mdep", "chat").get("status", {}).get("swapPlan"))
        )
        started = time.time()
        wait_for(
            "plan Completed",
            lambda: plan_status(e2e, plan).get("phase") == "Completed",
            timeout=300,
        )
        completed = time.time()
        wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
        time.sleep(2)
    slot = naming.slot_name(e2e.namespace, "chat")
    new = f"file://{model_b}"
    events = json.loads(
        e2e.kubectl("get", "events", "-A", "-o", "json", "--field-selector", "reason=NodeReady")
    )["items"]
    ready_events = sum(1 for e in events if e["involvedObject"]["name"] in nodes)
    figures.update(
        scenario="7 two operators without election",
        plan_s=round(completed - started, 2),
        requests_ok=load.ok,
        requests_failed=load.failed,
        node_ready_events=ready_events,
    )
    for agent in pool:
        records = agent.swaps(slot)
        assert [(r["toSource"], r["outcome"]) for r in records] == [(new, "Completed")]
        assert_sequential(records)
    plans = [p["metadata"]["name"] for p in e2e.list("swapplans")]
    assert plans == [plan]
    assert {n: len(s) for n, s in slots_everywhere(pool, slot).items()} == {"a": 1, "b": 1}
    assert load.failed == 0, load.errors[:5]
    assert load.lost() == 0
    assert all(r.alive() for r in operators.replicas.values())


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

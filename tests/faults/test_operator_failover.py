"""Scenario 1: the leader operator is SIGKILLed in the middle of a SwapPlan, two replicas elect a
leader on the Lease: the standby takes over within the bound, finishes the plan from its status
without repeating a step, and clients streaming through the EndpointSlices see no failure. The
standby never talks to an agent while it stands by."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mlxfleet_operator.core import naming
from tests.e2e.conftest import E2E, Agents, is_true, wait_for
from tests.faults.conftest import (
    Operators,
    endpoint_urls,
    plan_status,
    slots_everywhere,
    takeover,
    traffic,
)
from tests.support.kubeapi import AdminApi, LeaseSampler

pytestmark = [pytest.mark.faults, pytest.mark.cluster, pytest.mark.mlx, pytest.mark.timeout(600)]

TAKEOVER_GOAL = 5.0


def test_leader_sigkilled_mid_swapplan_standby_finishes_it(
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    lease: LeaseSampler,
    admin: AdminApi,
    figures: dict[str, object],
    model_a: Path,
    model_b: Path,
) -> None:
    pool = [agents.start("a"), agents.start("b")]
    for agent in pool:
        e2e.register(agent)
    operators.start("op-1")
    leader = operators.leader()
    standby = operators.start("op-2")
    e2e.apply(e2e.deployment("chat", model_a))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    wait_for("both endpoints", lambda: len(endpoint_urls(admin, e2e.namespace, "chat")) == 2)

    ports = {a.control_port for a in pool}
    contacts: list[str] = []
    watching = threading.Event()

    def watch_standby() -> None:  # the standby must not talk to agents
        while not watching.is_set():
            contacts.extend(standby.agent_connections(ports))
            watching.wait(0.1)

    watcher = threading.Thread(target=watch_standby, daemon=True)
    watcher.start()
    with traffic(admin, e2e, "chat") as load:
        time.sleep(1)
        e2e.apply(e2e.deployment("chat", model_b))
        plan = str(
            wait_for("SwapPlan", lambda: e2e.get("mdep", "chat").get("status", {}).get("swapPlan"))
        )
        wait_for(
            "first step done",
            lambda: plan_status(e2e, plan).get("progress") == "1/2",
            timeout=300,
            interval=0.1,
        )
        watching.set()
        watcher.join()
        killed = operators.kill(leader.name)
        successor = operators.leader(other_than=leader.name, timeout=30)
        wait_for(
            "plan Completed after the takeover",
            lambda: plan_status(e2e, plan).get("phase") == "Completed",
            timeout=300,
        )
        completed = time.time()
        wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
        time.sleep(1)
    took = takeover(lease, killed)
    figures.update(
        scenario="1 leader SIGKILLed mid-SwapPlan",
        takeover_s=round(took, 2),
        converge_s=round(completed - killed, 2),
        requests_ok=load.ok,
        requests_failed=load.failed,
    )
    assert successor.name == standby.name
    assert contacts == [], f"the standby talked to agents: {contacts[:5]}"
    assert load.failed == 0, load.errors[:5]
    assert load.lost() == 0
    assert load.ok > 0
    assert took <= TAKEOVER_GOAL, took
    steps = plan_status(e2e, plan)["steps"]
    assert [s["phase"] for s in steps] == ["Completed", "Completed"]  # type: ignore[index]
    slot = naming.slot_name(e2e.namespace, "chat")
    new = f"file://{model_b}"
    for agent in pool:  # each node swapped exactly once: no step was repeated
        assert [(r["toSource"], r["outcome"]) for r in agent.swaps(slot)] == [(new, "Completed")]
    deployment = e2e.get("mdep", "chat")
    assert deployment["status"]["readyReplicas"] == 2
    assert all(p["source"] == new for p in deployment["status"]["placements"])
    assert {n: len(s) for n, s in slots_everywhere(pool, slot).items()} == {"a": 1, "b": 1}
    assert leader.exits == [-9]  # restarted once, as a standby

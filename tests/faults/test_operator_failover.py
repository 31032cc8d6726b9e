"""Scenario 1: the leader operator is SIGKILLed in the middle of a SwapPlan, two replicas elect a
leader on the Lease: the standby takes over within the bound, finishes the plan from its status
without repeating a step, and clients streaming through the EndpointSlices see no failure. The
standby never talks to an agent while it stands by. And a leader that gets SIGTERM steps down:
the standby takes over within a second of the release."""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime
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
STEP_DOWN_GOAL = 1.0


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


def logged_at(text: str, needle: str) -> float | None:
    """Unix time of the first operator log line containing `needle` (asctime is UTC here)."""
    for line in text.splitlines():
        if needle in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.replace(tzinfo=UTC).timestamp()
    return None


def test_leader_steps_down_on_sigterm_and_the_standby_takes_over_at_once(
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    lease: LeaseSampler,
    figures: dict[str, object],
    model_a: Path,
) -> None:
    """A rolling update or a drain: SIGTERM stops the leader's kopf, then it releases the Lease;
    the standby holds it within one second of the release."""
    e2e.register(agents.start("a"))
    operators.start("op-1")
    leader = operators.leader()
    standby = operators.start("op-2")
    e2e.apply(e2e.deployment("chat", model_a, replicas=1))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    time.sleep(2)  # timers and the poller are running on the leader
    leader.supervised = False
    asked = operators.kill(leader.name, signal.SIGTERM)
    assert leader.proc is not None
    assert leader.proc.wait(timeout=30) == 0
    successor = operators.leader(other_than=leader.name, timeout=10)
    took = takeover(lease, asked)
    released = logged_at(leader.log(), "released the lease")
    assert released is not None, leader.log()[-2000:]
    figures.update(
        scenario="1b leader SIGTERM (step-down)",
        sigterm_to_release_s=round(released - asked, 3),
        release_to_takeover_s=round(asked + took - released, 3),
        sigterm_to_takeover_s=round(took, 3),
    )
    assert successor.name == standby.name
    assert asked + took - released <= STEP_DOWN_GOAL, (released - asked, took)
    wait_for("the new leader reconciles", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))

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

from tests.e2e.conftest import is_true, wait_for
from tests.faults.conftest import takeover
from tests.faults.steps import Fleet, assert_swapped_cleanly, first_step_done, swap_during
from tests.support.kubeapi import LeaseSampler

pytestmark = [pytest.mark.faults, pytest.mark.cluster, pytest.mark.mlx, pytest.mark.timeout(600)]

TAKEOVER_GOAL = 5.0
STEP_DOWN_GOAL = 1.0


def test_leader_sigkilled_mid_swapplan_standby_finishes_it(
    fleet: Fleet,
    lease: LeaseSampler,
    figures: dict[str, object],
    model_a: Path,
    model_b: Path,
) -> None:
    pool = [fleet.agents.start("a"), fleet.agents.start("b")]
    for agent in pool:
        fleet.e2e.register(agent)
    fleet.elect_two()
    leader, standby = fleet.operators.replicas["op-1"], fleet.operators.replicas["op-2"]
    fleet.deploy("chat", model_a)

    ports = {a.control_port for a in pool}
    contacts: list[str] = []
    watching = threading.Event()

    def watch_standby() -> None:  # the standby must not talk to agents
        while not watching.is_set():
            contacts.extend(standby.agent_connections(ports))
            watching.wait(0.1)

    killed: list[float] = []

    def kill_the_leader() -> None:
        watching.set()
        watcher.join()
        killed.append(fleet.operators.kill(leader.name))

    watcher = threading.Thread(target=watch_standby, daemon=True)
    watcher.start()
    swap = swap_during(fleet, model_b, when=first_step_done, inject=kill_the_leader)
    successor = fleet.operators.leader()
    took = takeover(lease, killed[0])
    figures.update(
        scenario="1 leader SIGKILLed mid-SwapPlan",
        takeover_s=round(took, 2),
        converge_s=round(swap.completed - killed[0], 2),
        requests_ok=swap.load.ok,
        requests_failed=swap.load.failed,
    )
    assert successor.name == standby.name
    assert contacts == [], f"the standby talked to agents: {contacts[:5]}"
    assert took <= TAKEOVER_GOAL, took
    assert_swapped_cleanly(fleet, swap, pool, model_b)
    assert leader.exits == [-9]  # restarted once, as a standby


def logged_at(text: str, needle: str) -> float | None:
    """Unix time of the first operator log line containing `needle` (asctime is UTC here)."""
    for line in text.splitlines():
        if needle in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.replace(tzinfo=UTC).timestamp()
    return None


def test_leader_steps_down_on_sigterm_and_the_standby_takes_over_at_once(
    fleet: Fleet, lease: LeaseSampler, figures: dict[str, object], model_a: Path
) -> None:
    """A rolling update or a drain: SIGTERM stops the leader's kopf, then it releases the Lease;
    the standby holds it within one second of the release."""
    fleet.e2e.register(fleet.agents.start("a"))
    fleet.elect_two()
    leader, standby = fleet.operators.replicas["op-1"], fleet.operators.replicas["op-2"]
    fleet.deploy("chat", model_a, replicas=1)
    time.sleep(2)  # timers and the poller are running on the leader
    leader.supervised = False
    asked = fleet.operators.kill(leader.name, signal.SIGTERM)
    assert leader.proc is not None
    assert leader.proc.wait(timeout=30) == 0
    successor = fleet.operators.leader(other_than=leader.name, timeout=10)
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
    wait_for("the new leader reconciles", lambda: is_true(fleet.e2e.get("mdep", "chat"), "Ready"))

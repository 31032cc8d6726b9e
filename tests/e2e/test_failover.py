"""Scenario 4: SIGKILL one agent: its node goes Ready=False within the configured misses, its
replica is re-placed on the third node and Ready; the agent comes back: no duplicate replica,
its stale slot is removed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, MISSES, POLL, Agents, Operator, condition, is_true, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.slow]


def test_lost_node_fails_over_and_returning_node_is_not_double_booked(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    pool = {
        e2e.register(agent): agent
        for agent in (agents.start("a"), agents.start("b"), agents.start("c"))
    }
    e2e.apply(e2e.deployment("chat", model_a))
    md = wait_for(
        "deployment Ready", lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Ready") and d
    )
    placed = sorted(p["node"] for p in md["status"]["placements"])
    spare = next(n for n in pool if n not in placed)
    lost = placed[0]
    slot = naming.slot_name(e2e.namespace, "chat")

    killed_at = time.monotonic()
    pool[lost].kill()
    wait_for(
        "lost node NotReady",
        lambda: (
            condition(e2e.get("inode", lost, namespaced=False), "Ready").get("reason")
            == "HeartbeatMissed"
        ),
    )
    detected = time.monotonic() - killed_at
    # misses x poll, plus one poll of jitter and the API round trips
    assert detected < MISSES * POLL + 2 * POLL + 5, detected
    moved = wait_for(
        "replica re-placed on the spare node and Ready",
        lambda: (
            (d := e2e.get("mdep", "chat"))
            and sorted(p["node"] for p in d["status"]["placements"]) == sorted([placed[1], spare])
            and d["status"]["readyReplicas"] == 2
            and is_true(d, "Ready")
            and d
        ),
    )
    assert len(moved["status"]["placements"]) == 2
    events = e2e.kubectl(
        "get", "events", "-A", "--field-selector", f"involvedObject.name={lost}", "-o", "json"
    )
    assert "NodeNotReady" in events

    pool[lost].start()  # same state dir: the agent restores the slot it had
    wait_for(
        "returned node Ready", lambda: is_true(e2e.get("inode", lost, namespaced=False), "Ready")
    )
    wait_for(
        "stale slot removed", lambda: all(s["name"] != slot for s in pool[lost].state()["slots"])
    )
    final = e2e.get("mdep", "chat")
    assert sorted(p["node"] for p in final["status"]["placements"]) == sorted([placed[1], spare])
    assert final["status"]["readyReplicas"] == 2
    assert final["status"]["replicas"] == 2
    served = [
        n for n, agent in pool.items() if any(s["name"] == slot for s in agent.state()["slots"])
    ]
    assert sorted(served) == sorted([placed[1], spare])  # exactly two replicas exist anywhere
    operator.assert_alive()

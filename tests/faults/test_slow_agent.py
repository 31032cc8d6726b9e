"""Scenario 6: a slow agent. Its control API is reached through a proxy that holds one request
for twice the operator's poll timeout: that poll times out (one miss), the node is not declared
dead, nothing moves, clients see no failure. Only `--misses` consecutive misses make it NotReady."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from pathlib import Path

import pytest

from mlxfleet_operator.adapters import agent as agent_client
from tests.e2e.conftest import MISSES, is_true
from tests.faults.steps import Fleet
from tests.support import tcpproxy

pytestmark = [pytest.mark.faults, pytest.mark.cluster, pytest.mark.mlx, pytest.mark.timeout(600)]

# how long the operator waits for /v1/state
POLL_TIMEOUT: float = agent_client.DEFAULT_TIMEOUT.sock_read or 0.0


def test_one_slow_answer_does_not_declare_the_node_dead(
    fleet: Fleet, figures: dict[str, object], model_a: Path
) -> None:
    assert MISSES >= 2  # one slow answer is one miss
    assert POLL_TIMEOUT > 0
    e2e, admin = fleet.e2e, fleet.admin
    slow, other = fleet.agents.start("a"), fleet.agents.start("b")
    front = tcpproxy.Proxy("127.0.0.1", slow.control_port)
    secret = f"agent-{e2e.label}-a"
    e2e.secret(secret, {"token": slow.token})
    na = e2e.node("a", f"http://{front.address}", secret)
    e2e.register(other)
    # every heartbeat written to status (the default debounces them to one a minute, issue 12):
    # this test reads the heartbeat times to see the one slow poll
    fleet.operators.start("op-1", "--heartbeat-write-seconds", "0", standalone=True)
    fleet.deploy("chat", model_a)
    before = fleet.placed("chat")
    ready, beats, placements = [], [], []
    with fleet.traffic("chat") as load:
        time.sleep(2)
        held = time.time()
        front.delay(2 * POLL_TIMEOUT, count=1)
        deadline = held + 2 * POLL_TIMEOUT + 6
        nodes = "/apis/mlxfleet.io/v1alpha1/inferencenodes"
        deployment = f"/apis/mlxfleet.io/v1alpha1/namespaces/{e2e.namespace}/modeldeployments/chat"
        while time.time() < deadline:
            node = admin.get(f"{nodes}/{na}") or {}
            ready.append(is_true(node, "Ready"))
            beats.append(node.get("status", {}).get("lastHeartbeatTime"))
            md = admin.get(deployment) or {}
            placements.append(sorted(p["node"] for p in md["status"]["placements"]))
            time.sleep(0.2)
    reasons = fleet.event_reasons(na)
    changes = [b for i, b in enumerate(beats) if i == 0 or b != beats[i - 1]]
    stamps = [datetime.fromisoformat(b.replace("Z", "+00:00")) for b in changes if b]
    # default: fewer than two heartbeats must reach the assertions below, not crash here
    gap = max(((b - a).total_seconds() for a, b in itertools.pairwise(stamps)), default=0.0)
    figures.update(
        scenario="6 slow agent (one answer held 2x the poll timeout)",
        held_s=2 * POLL_TIMEOUT,
        ready_samples=len(ready),
        not_ready_samples=ready.count(False),
        longest_heartbeat_gap_s=gap,
        requests_ok=load.ok,
        requests_failed=load.failed,
    )
    assert front.delayed == 1  # the slow answer really happened
    assert all(ready), ready
    assert "NodeNotReady" not in reasons, reasons
    assert placements == [before] * len(placements)
    assert gap >= POLL_TIMEOUT  # one poll really timed out (a miss) ...
    assert len(changes) >= 3  # ... and heartbeats went on after it
    assert load.failed == 0, load.errors[:5]
    assert load.lost() == 0
    front.stop()

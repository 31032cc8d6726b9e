"""Scenario 4: an agent's Mac "sleeps": the agent and its backends are SIGSTOPped for 30 s, then
SIGCONTed, while clients stream through the EndpointSlices.

The node goes NotReady after its missed polls, its replica is re-placed after the failover delay
(clients fail only on the sleeping agent, only until its endpoint is withdrawn); when it wakes
it is Ready again, its stale slot is removed and the replica stays where it moved."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from mlxfleet_operator.core import naming
from tests.e2e.conftest import E2E, Agents, condition, is_true, wait_for
from tests.faults.conftest import Operators, endpoint_urls, slots_everywhere, traffic
from tests.support.kubeapi import AdminApi

pytestmark = [
    pytest.mark.faults,
    pytest.mark.cluster,
    pytest.mark.mlx,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

SLEEP = 30.0


def test_sleeping_agent_is_routed_around_then_welcomed_back(
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    admin: AdminApi,
    figures: dict[str, object],
    model_a: Path,
) -> None:
    sleeper, kept = agents.start("a"), agents.start("b")
    na, nb = e2e.register(sleeper), e2e.register(kept)
    operators.start("op-1")
    operators.leader()
    operators.start("op-2")
    e2e.apply(e2e.deployment("chat", model_a))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    spare = agents.start("c")
    nc = e2e.register(spare)
    wait_for("spare Ready", lambda: is_true(e2e.get("inode", nc, namespaced=False), "Ready"))
    wait_for("both endpoints", lambda: len(endpoint_urls(admin, e2e.namespace, "chat")) == 2)
    assert sleeper.proc is not None
    group = sleeper.proc.pid
    slot = naming.slot_name(e2e.namespace, "chat")
    try:
        with traffic(admin, e2e, "chat") as load:
            time.sleep(2)
            slept = time.time()
            os.killpg(group, signal.SIGSTOP)
            wait_for(
                "node NotReady",
                lambda: (
                    condition(e2e.get("inode", na, namespaced=False), "Ready").get("reason")
                    == "HeartbeatMissed"
                ),
            )
            detected = time.time()
            wait_for(
                "endpoint withdrawn",
                lambda: sleeper.data_url not in endpoint_urls(admin, e2e.namespace, "chat"),
                interval=0.1,
            )
            withdrawn = time.time()
            wait_for(
                "replica re-placed",
                lambda: (
                    (d := e2e.get("mdep", "chat"))
                    and sorted(p["node"] for p in d["status"]["placements"]) == sorted([nb, nc])
                    and is_true(d, "Ready")
                ),
            )
            replaced = time.time()
            time.sleep(max(0.0, slept + SLEEP - time.time()))
            woke = time.time()
            os.killpg(group, signal.SIGCONT)
            wait_for("node Ready", lambda: is_true(e2e.get("inode", na, namespaced=False), "Ready"))
            back = time.time()
            wait_for("stale slot removed", lambda: slots_everywhere([sleeper], slot).get("a") == [])
            cleaned = time.time()
            placements = []
            for _ in range(16):
                d = e2e.get("mdep", "chat")
                placements.append(sorted(p["node"] for p in d["status"]["placements"]))
                time.sleep(0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)
    events = e2e.kubectl(
        "get", "events", "-A", "--field-selector", f"involvedObject.name={na}", "-o", "json"
    )
    reasons = [e["reason"] for e in json.loads(events)["items"]]
    figures.update(
        scenario="4 agent SIGSTOP 30 s, then SIGCONT",
        detect_s=round(detected - slept, 2),
        withdrawn_s=round(withdrawn - slept, 2),
        replaced_s=round(replaced - slept, 2),
        ready_after_wake_s=round(back - woke, 2),
        stale_slot_removed_s=round(cleaned - woke, 2),
        requests_ok=load.ok,
        requests_failed=load.failed,
    )
    assert all(o.endpoint == sleeper.data_url for o in load.failures()), load.errors[:5]
    assert all(o.started < withdrawn + 1 for o in load.failures()), load.errors[:5]
    assert load.lost() == 0
    assert placements == [sorted([nb, nc])] * len(placements)
    assert reasons.count("NodeNotReady") == 1, reasons
    assert {n: len(s) for n, s in slots_everywhere([sleeper, kept, spare], slot).items()} == {
        "a": 0,
        "b": 1,
        "c": 1,
    }

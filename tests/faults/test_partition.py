"""Scenario 3: a network partition of one agent. The agent runs in its own network namespace
joined to the host by a veth pair; the link is cut while clients stream through the
EndpointSlices (host) and straight to the agent (inside the namespace), then healed.

While cut off the agent keeps serving its local clients (0 failures there); the operator marks
the node NotReady after its missed polls and re-places the replica after the failover delay;
host clients fail only on the cut-off agent, only until its endpoint is withdrawn. On heal the
node is Ready again, its stale slot is removed, the replica stays where it moved (no flapping)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlxfleet_operator.core import naming
from tests.e2e.conftest import E2E, Agents, condition, is_true, wait_for
from tests.faults import netns
from tests.faults.conftest import Operators, endpoint_urls, slots_everywhere, traffic
from tests.support.kubeapi import AdminApi

pytestmark = [
    pytest.mark.faults,
    pytest.mark.cluster,
    pytest.mark.mlx,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        sys.platform != "linux" or os.geteuid() != 0, reason="ip netns needs Linux and root"
    ),
]


def ready_reason(e2e: E2E, node: str) -> str | None:
    return condition(e2e.get("inode", node, namespaced=False), "Ready").get("reason")


def test_partitioned_agent_serves_locally_is_replaced_and_cleaned_up_on_heal(
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    admin: AdminApi,
    figures: dict[str, object],
    model_a: Path,
    tmp_path: Path,
) -> None:
    with netns.namespace() as net:
        cut_off = agents.start("p", host=net.inner_ip, prefix=net.exec_prefix)
        kept = agents.start("b")
        np, nb = e2e.register(cut_off), e2e.register(kept)
        operators.start("op-1")
        operators.leader()
        operators.start("op-2")
        e2e.apply(e2e.deployment("chat", model_a))
        wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
        spare = agents.start("c")
        nc = e2e.register(spare)
        wait_for(
            "spare node Ready", lambda: is_true(e2e.get("inode", nc, namespaced=False), "Ready")
        )
        wait_for("both endpoints", lambda: len(endpoint_urls(admin, e2e.namespace, "chat")) == 2)
        local_out = tmp_path / "local-load.json"
        local = subprocess.Popen(
            [
                *net.exec_prefix, sys.executable, "-m", "tests.e2e.loadgen",
                "--base-url", cut_off.data_url, "--model", "chat", "--out", str(local_out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        with traffic(admin, e2e, "chat") as load:
            time.sleep(2)
            cut = time.time()
            net.cut()
            wait_for("node NotReady", lambda: ready_reason(e2e, np) == "HeartbeatMissed")
            detected = time.time()
            wait_for(
                "endpoint withdrawn",
                lambda: cut_off.data_url not in endpoint_urls(admin, e2e.namespace, "chat"),
                interval=0.1,
            )
            withdrawn = time.time()
            wait_for(
                "replica re-placed and Ready",
                lambda: (
                    (d := e2e.get("mdep", "chat"))
                    and sorted(p["node"] for p in d["status"]["placements"]) == sorted([nb, nc])
                    and d["status"]["readyReplicas"] == 2
                    and is_true(d, "Ready")
                ),
            )
            replaced = time.time()
            time.sleep(3)  # the cut-off agent still serves its own clients
            local.send_signal(signal.SIGTERM)
            local.wait(timeout=60)
            healed = time.time()
            net.heal()
            wait_for(
                "node Ready again", lambda: is_true(e2e.get("inode", np, namespaced=False), "Ready")
            )
            back = time.time()
            slot = naming.slot_name(e2e.namespace, "chat")
            wait_for(
                "stale slot removed",
                lambda: slots_everywhere([cut_off], slot).get("p") == [],
                interval=0.2,
            )
            cleaned = time.time()
            placements = []
            for _ in range(20):  # no flapping: the replica stays where it moved
                d = e2e.get("mdep", "chat")
                placements.append(sorted(p["node"] for p in d["status"]["placements"]))
                time.sleep(0.5)
        inside = json.loads(local_out.read_text())
        events = e2e.kubectl(
            "get", "events", "-A", "--field-selector", f"involvedObject.name={np}", "-o", "json"
        )
        reasons = [e["reason"] for e in json.loads(events)["items"]]
        figures.update(
            scenario="3 network partition of one agent",
            detect_s=round(detected - cut, 2),
            withdrawn_s=round(withdrawn - cut, 2),
            replaced_s=round(replaced - cut, 2),
            healed_ready_s=round(back - healed, 2),
            stale_slot_removed_s=round(cleaned - healed, 2),
            host_requests_ok=load.ok,
            host_requests_failed=load.failed,
            local_requests_ok=inside["ok"],
            local_requests_failed=inside["failed"],
        )
        assert inside["failed"] == 0, inside["outcomes"][-3:]
        assert inside["ok"] > 0
        assert inside["started"] == len(inside["outcomes"])  # none lost
        in_cut = [o for o in inside["outcomes"] if cut < o["started"] < healed]
        assert len(in_cut) > 0  # it really served while cut off
        assert all(o.endpoint == cut_off.data_url for o in load.failures()), load.errors[:5]
        assert all(o.started < withdrawn + 1 for o in load.failures()), load.errors[:5]
        assert load.lost() == 0
        assert placements == [sorted([nb, nc])] * len(placements)
        assert reasons.count("NodeNotReady") == 1, reasons
        assert reasons.count("NodeReady") <= 2, reasons  # first contact, then the return
        assert {n: len(s) for n, s in slots_everywhere([cut_off, kept, spare], slot).items()} == {
            "p": 0,
            "b": 1,
            "c": 1,
        }
        cut_off.stop()

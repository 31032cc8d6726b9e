"""Priority and preemption on the real control plane, operator and agents with mlx-lm: two
deployments that do not fit together on one Mac. An equal priority waits and evicts nothing; a
higher priority evicts the lower one, both statuses and Events say who was evicted for whom,
and when the memory frees the lower one comes back after its back-off. A Mac reporting memory
pressure (the agent's PSI reading) gets no new replica, and its InferenceNode says why."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.dev import controlplane, processes
from tests.e2e.conftest import BIN, E2E, Agent, Agents, Operator, condition, is_true, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]

BACKOFF_S = 4.0
BUDGET = 1024 * 2**20  # the Mac's memory budget: one 600Mi replica fits, two do not
MEMORY = "600Mi"


@pytest.fixture
def operator(cluster: controlplane.ControlPlane, tmp_path: Path) -> Iterator[Operator]:
    """The e2e operator, with a short preemption back-off."""
    op = Operator(cluster=cluster, root=tmp_path / "operator")
    op.metrics_port, op.liveness_port = processes.free_ports(2)
    op.start("--preemption-backoff", str(BACKOFF_S))
    yield op
    op.stop()


def deployment(e2e: E2E, name: str, source: Path, **spec: Any) -> dict[str, Any]:
    return e2e.deployment(name, source, replicas=1, resources={"memory": MEMORY}, **spec)


def slots(agent: Agent) -> set[str]:
    return {s["name"] for s in agent.state()["slots"]}


def events(e2e: E2E, name: str, reason: str, starting: str = "") -> list[dict[str, Any]]:
    """The object's Events with this reason (a condition's change to the same reason is an Event
    too: `starting` picks the ones whose message starts so)."""
    out = e2e.kubectl(
        "get", "events", "-n", e2e.namespace,
        "--field-selector", f"involvedObject.name={name},reason={reason}", "-o", "json",
    )  # fmt: skip
    return [e for e in json.loads(out)["items"] if e["message"].startswith(starting)]


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_higher_priority_evicts_the_lower_which_comes_back_and_equals_never_evict(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    mac = agents.start("a", memory_budget=BUDGET)
    node = e2e.register(mac)
    ns = e2e.namespace
    low_slot, high_slot = naming.slot_name(ns, "low"), naming.slot_name(ns, "high")
    e2e.apply(deployment(e2e, "low", model_a, minReplicas=0, idleTimeout="1h"))
    wait_for("low Ready", lambda: is_true(e2e.get("mdep", "low"), "Ready"))

    # an equal priority waits for capacity and evicts nothing
    e2e.apply(deployment(e2e, "peer", model_b))
    wait_for(
        "peer waiting for capacity",
        lambda: condition(e2e.get("mdep", "peer"), "Ready").get("reason") == "WaitingForCapacity",
    )
    time.sleep(5)  # five polls: time enough to evict, were it allowed
    low, peer = e2e.get("mdep", "low"), e2e.get("mdep", "peer")
    assert is_true(low, "Ready"), low["status"]
    assert low_slot in slots(mac)
    assert condition(peer, "Ready")["reason"] == "WaitingForCapacity", peer["status"]
    assert not peer["status"].get("preempting")
    assert not low["status"].get("preemptedBy")
    assert events(e2e, "peer", "Preempting") == []
    assert events(e2e, "low", "Preempted") == []
    e2e.kubectl("delete", "mdep", "peer", "-n", ns, "--wait=true", "--timeout=60s")

    # a higher priority evicts it
    applied = time.monotonic()
    e2e.apply(deployment(e2e, "high", model_b, priority=10))
    high = wait_for(
        "high Ready", lambda: (d := e2e.get("mdep", "high")) and is_true(d, "Ready") and d
    )
    print(f"high Ready {time.monotonic() - applied:.1f}s after its apply, with preemption")
    assert slots(mac) == {high_slot}
    low = e2e.get("mdep", "low")
    ready = condition(low, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Preempted"), low["status"]
    assert f"replica on {node} evicted for {ns}/high (priority 10 > 0)" in ready["message"]
    (record,) = low["status"]["preemptedBy"]
    assert (record["node"], record["deployment"], record["priority"]) == (node, f"{ns}/high", 10)
    (taken,) = high["status"]["preempting"]
    assert (taken["node"], taken["deployment"], taken["priority"]) == (node, f"{ns}/low", 0)
    (evicting,) = events(e2e, "high", "Preempting", "evicting the replica of")
    assert f"{ns}/low (priority 0 < 10) on {node}" in evicting["message"]
    (evicted,) = events(e2e, "low", "Preempted", "replica on")
    assert evicted["type"] == "Warning"
    assert f"evicted for {ns}/high (priority 10 > 0)" in evicted["message"]
    screen = subprocess.run(
        [str(BIN / "kubectl-mlxfleet"), "status", "-n", ns, "--kubeconfig",
         str(e2e.cluster.kubeconfig)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert f"preempted by {ns}/high (priority 10) on {node}" in screen, screen
    assert f"preempting {ns}/low (priority 0) on {node}" in screen, screen

    # when the memory frees, the lower one comes back (not before its back-off)
    e2e.kubectl("delete", "mdep", "high", "-n", ns, "--wait=true", "--timeout=60s")
    wait_for("low Ready again", lambda: is_true(e2e.get("mdep", "low"), "Ready"))
    back = datetime.now().astimezone()
    assert back >= when(record["backoffUntil"]), (back, record)
    assert low_slot in slots(mac)
    low = e2e.get("mdep", "low")
    assert [p["node"] for p in low["status"]["placements"]] == [node]
    operator.assert_alive()


PSI = (
    "some avg10={some:.2f} avg60=0.00 avg300=0.00 total=1\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def test_a_mac_under_memory_pressure_gets_no_new_replica_and_says_why(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, tmp_path: Path
) -> None:
    psi = tmp_path / "memory.pressure"
    psi.write_text(PSI.format(some=35.0))
    pressed = agents.start("a", flags=["--memory-pressure-file", str(psi)])
    name = e2e.register(pressed)
    reading = wait_for(
        "MemoryPressure True",
        lambda: (
            (c := condition(e2e.get("inode", name, namespaced=False), "MemoryPressure"))
            and c.get("status") == "True"
            and c
        ),
    )
    assert reading["reason"] == "MemoryWarn"
    assert "PSI memory some avg10=35.00%" in reading["message"]
    assert "no new replicas are placed here" in reading["message"]
    e2e.apply(e2e.deployment("chat", model_a, replicas=1))
    ready = wait_for(
        "chat waiting, naming the pressure",
        lambda: (
            (c := condition(e2e.get("mdep", "chat"), "Ready"))
            and "PSI memory some avg10=35.00%" in c.get("message", "")
            and c
        ),
    )
    assert ready["reason"] == "WaitingForCapacity", ready
    assert naming.slot_name(e2e.namespace, "chat") not in slots(pressed)
    psi.write_text(PSI.format(some=0.0))  # the pressure clears: the replica goes there
    wait_for("chat Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    node = e2e.get("inode", name, namespaced=False)
    assert condition(node, "MemoryPressure")["status"] == "False"
    memory = node["status"]["memory"]
    assert memory["freeBytes"] == memory["allocatableBytes"] - memory["usedBytes"]
    assert memory["usedBytes"] > 0
    free = e2e.kubectl("get", "inode", name)
    assert "FREE" in free.splitlines()[0]
    assert memory["free"] in free
    operator.assert_alive()

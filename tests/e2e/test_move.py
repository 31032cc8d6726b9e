"""Moving replicas between nodes without dropping a request, while openai-client workers stream
through the EndpointSlices: a person changes a deployment's `spec.placement.nodes` (the new
node's replica serves and is in the EndpointSlice before the old node's slot is deleted), or
writes a SwapPlan whose `spec.nodes` names a node without a replica."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agent, Agents, Operator, is_true, wait_for
from tests.e2e.loadgen import DiscoveredLoad

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def ready_endpoints(e2e: E2E, deployment: str) -> list[str]:
    """Ready data-plane URLs from the deployment's EndpointSlices (agents run on loopback)."""
    service = naming.service_name(deployment)
    out = e2e.kubectl(
        "get", "endpointslices", "-n", e2e.namespace,
        "-l", f"kubernetes.io/service-name={service}", "-o", "json",
    )  # fmt: skip
    urls = []
    for item in json.loads(out)["items"]:
        port = item["ports"][0]["port"]
        for ep in item.get("endpoints") or []:
            if ep["conditions"].get("ready"):
                urls.append(f"http://127.0.0.1:{port}")
    return sorted(urls)


def slot_of(agent: Agent, slot: str) -> dict[str, object] | None:
    return next((s for s in agent.state()["slots"] if s["name"] == slot), None)


def test_changing_placement_nodes_moves_a_replica_make_before_break(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    a, b, c = (agents.start(n) for n in ("a", "b", "c"))
    na, nb, nc = (e2e.register(x) for x in (a, b, c))
    spec = {"placement": {"nodes": [na, nb]}}
    e2e.apply(e2e.deployment("chat", model_a, **spec))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    slot = naming.slot_name(e2e.namespace, "chat")
    wait_for(
        "both endpoints published",
        lambda: ready_endpoints(e2e, "chat") == sorted([a.data_url, b.data_url]),
    )

    seen: dict[str, float] = {}  # first time each event was observed
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            now = time.monotonic()
            c_slot = slot_of(c, slot)
            if c_slot is not None and c_slot["ready"]:
                seen.setdefault("c ready", now)
            if c.data_url in ready_endpoints(e2e, "chat"):
                seen.setdefault("c published", now)
            if slot_of(b, slot) is None:
                seen.setdefault("b deleted", now)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    with DiscoveredLoad(lambda: ready_endpoints(e2e, "chat"), "chat", workers=3) as load:
        time.sleep(2)
        watcher.start()
        e2e.apply(e2e.deployment("chat", model_a, placement={"nodes": [na, nc]}))
        wait_for(
            "placements a and c Ready, b gone",
            lambda: (
                (d := e2e.get("mdep", "chat"))
                and sorted(p["node"] for p in d["status"]["placements"]) == sorted([na, nc])
                and d["status"]["readyReplicas"] == 2
                and is_true(d, "Ready")
                and slot_of(b, slot) is None
            ),
        )
        time.sleep(2)
        stop.set()
        watcher.join(timeout=30)
    assert load.failed == 0, load.errors[:5]
    assert load.served_by.get(c.data_url, 0) > 0, load.served_by  # clients moved on to c
    assert load.served_by.get(b.data_url, 0) > 0, load.served_by
    assert seen["c ready"] < seen["b deleted"], seen
    assert seen["c published"] < seen["b deleted"], seen
    assert ready_endpoints(e2e, "chat") == sorted([a.data_url, c.data_url])
    assert slot_of(a, slot) is not None
    events = e2e.kubectl(
        "get", "events", "-n", e2e.namespace,
        "--field-selector", "involvedObject.name=chat,reason=Rescheduled", "-o", "json",
    )  # fmt: skip
    assert len(json.loads(events)["items"]) == 1
    operator.assert_alive()


def test_person_written_swapplan_moves_a_replica_to_a_node_without_one(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    pool = {e2e.register(x): x for x in (agents.start("a"), agents.start("b"), agents.start("c"))}
    e2e.apply(e2e.deployment("chat", model_a))
    md = wait_for(
        "deployment Ready", lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Ready") and d
    )
    placed = [p["node"] for p in md["status"]["placements"]]
    spare = next(n for n in sorted(pool) if n not in placed)
    stay, leave = placed
    slot = naming.slot_name(e2e.namespace, "chat")
    with DiscoveredLoad(lambda: ready_endpoints(e2e, "chat"), "chat", workers=3) as load:
        time.sleep(2)
        e2e.apply({
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "SwapPlan",
            "metadata": {"name": "move", "namespace": e2e.namespace},
            "spec": {
                "deploymentRef": {"name": "chat"},
                "target": {"source": f"file://{model_a}"},
                "nodes": [stay, spare],
            },
        })  # fmt: skip
        wait_for(
            "plan Completed",
            lambda: e2e.get("swp", "move").get("status", {}).get("phase") == "Completed",
        )
        wait_for(
            "replicas on the listed nodes, the unlisted one's slot gone",
            lambda: (
                (d := e2e.get("mdep", "chat"))
                and sorted(p["node"] for p in d["status"]["placements"]) == sorted([stay, spare])
                and d["status"]["readyReplicas"] == 2
                and is_true(d, "Ready")
                and slot_of(pool[leave], slot) is None
            ),
        )
        time.sleep(1)
    assert load.failed == 0, load.errors[:5]
    steps = e2e.get("swp", "move")["status"]["steps"]
    assert [(s["node"], s.get("replaces")) for s in steps] == [(stay, None), (spare, leave)]
    assert steps[1]["message"] == f"moved from {leave}"
    assert ready_endpoints(e2e, "chat") == sorted([pool[stay].data_url, pool[spare].data_url])
    operator.assert_alive()

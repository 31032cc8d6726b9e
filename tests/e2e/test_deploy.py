"""Scenario 1: apply a 2-replica ModelDeployment -> Ready; the EndpointSlice lists both agents;
a chat completion through each placement's endpoint works."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import E2E, Agents, Operator, is_true, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def test_apply_to_ready_and_serve(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    a, b = agents.start("a"), agents.start("b")
    nodes = {e2e.register(a): a, e2e.register(b): b}
    wait_for(
        "both nodes Ready",
        lambda: all(is_true(e2e.get("inode", n, namespaced=False), "Ready") for n in nodes),
    )
    e2e.apply(e2e.deployment("chat", model_a))
    md = wait_for(
        "deployment Ready", lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Ready") and d
    )
    status = md["status"]
    assert status["readyReplicas"] == 2
    assert status["observedGeneration"] == md["metadata"]["generation"]
    assert sorted(p["node"] for p in status["placements"]) == sorted(nodes)
    assert status["estimatedMemoryBytes"] > 0
    # EndpointSlices of the Service list both agents' data planes, ready
    slices = e2e.list("endpointslices")
    ports = sorted(
        s["ports"][0]["port"]
        for s in slices
        if s["metadata"]["labels"].get("kubernetes.io/service-name") == "chat"
    )
    assert ports == sorted([a.data_port, b.data_port])
    assert all(ep["conditions"]["ready"] for s in slices for ep in s["endpoints"])
    svc = e2e.get("service", "chat")
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "ModelDeployment"
    # a completion through each placement's endpoint
    for placement in status["placements"]:
        client = openai.OpenAI(
            base_url=placement["endpoint"] + "/v1", api_key="unused", max_retries=0
        )
        reply = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
        assert reply.choices[0].message.content
    operator.assert_alive()

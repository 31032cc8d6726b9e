"""Scenario 1: apply a 2-replica ModelDeployment -> Ready; the EndpointSlice lists both agents;
a chat completion through each placement's endpoint works."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
import trustme

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agent, Agents, Operator, is_true, wait_for

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
    # what a GitOps pipeline or an admin runs
    e2e.kubectl("-n", e2e.namespace, "wait", "--for=condition=Ready", "mdep/chat", "--timeout=110s")
    md = e2e.get("mdep", "chat")
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
    # the operator's own endpoints: liveness and Prometheus metrics
    live = httpx.get(f"http://127.0.0.1:{operator.liveness_port}/healthz", timeout=5)
    assert live.status_code == 200
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5).text
    ready = f'name="chat",namespace="{e2e.namespace}"}} 2.0'
    assert f"mlxfleet_operator_deployment_ready_replicas{{{ready}" in text
    assert 'mlxfleet_operator_agent_calls_total{op="put_slot",result="ok"}' in text
    # deleting the deployment removes its slots from the agents and its Service
    slot = naming.slot_name(e2e.namespace, "chat")
    e2e.kubectl("-n", e2e.namespace, "delete", "mdep", "chat", "--timeout=60s")
    for agent in (a, b):

        def gone(agent: Agent = agent) -> bool:
            return all(s["name"] != slot for s in agent.state()["slots"])

        wait_for("slot removed", gone)
    assert e2e.get("service", "chat") == {}
    assert not [s for s in e2e.list("endpointslices") if s["metadata"]["name"].startswith("chat-")]
    operator.assert_alive()


def test_https_agent_with_private_ca(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = (tmp_path / "agent.crt", tmp_path / "agent.key", tmp_path / "ca.crt")
    cert.cert_chain_pems[0].write_to_path(str(paths[0]))
    cert.private_key_pem.write_to_path(str(paths[1]))
    ca.cert_pem.write_to_path(str(paths[2]))
    agent = agents.start("tls", tls=paths)
    assert agent.url.startswith("https://")
    node = e2e.register(agent)
    wait_for("https node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    e2e.apply(e2e.deployment("secure", model_a, replicas=1))
    md = wait_for("Ready", lambda: (d := e2e.get("mdep", "secure")) and is_true(d, "Ready") and d)
    assert md["status"]["placements"][0]["endpoint"] == agent.data_url
    operator.assert_alive()

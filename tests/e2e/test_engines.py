"""Engines end to end: an embedding ModelDeployment (`mlx-embed`) and a reranker (`mlx-rerank`)
go Ready through the real operator and agent, are listed in /v1/models and answer through the
agent's data plane and through mlxfleet-gateway (the `openai` client's embeddings.create, httpx
for rerank; a relevant document scores above an irrelevant one; the gateway's vectors equal the
agent's); a deployment whose engine no node can run (`vllm`
here: no GPU) is Ready=False EngineUnavailable naming it, and the operator keeps running."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from mlxfleet_agent.dev import testmodels
from tests.e2e.conftest import E2E, Agents, Operator, condition, is_true, wait_for
from tests.support import gateway as gws

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def test_embedding_and_reranker_deployments_serve_and_unrunnable_engine_is_reported(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    embedding_model: Path,
    reranker_model: Path,
    model_a: Path,
    tmp_path: Path,
) -> None:
    a = agents.start("a")
    node = e2e.register(a)
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    engines = {e["name"]: e for e in e2e.get("inode", node, namespaced=False)["status"]["engines"]}
    assert engines["mlx-embed"]["available"]
    assert engines["mlx-rerank"]["available"]
    assert not engines["vllm"]["available"]

    e2e.apply(e2e.deployment("emb", embedding_model, replicas=1, engine={"name": "mlx-embed"}))
    e2e.apply(e2e.deployment("rr", reranker_model, replicas=1, engine={"name": "mlx-rerank"}))
    e2e.apply(e2e.deployment("big", model_a, replicas=1, engine={"name": "vllm"}))
    for name in ("emb", "rr"):
        e2e.kubectl(
            "-n", e2e.namespace, "wait", "--for=condition=Ready", f"mdep/{name}", "--timeout=150s"
        )

    def unavailable() -> bool:
        return condition(e2e.get("mdep", "big"), "Ready").get("reason") == "EngineUnavailable"

    wait_for("big is EngineUnavailable", unavailable)
    ready = condition(e2e.get("mdep", "big"), "Ready")
    assert ready["status"] == "False"
    assert "cannot run engine vllm" in ready["message"]

    endpoint = e2e.get("mdep", "emb")["status"]["placements"][0]["endpoint"]
    client = openai.OpenAI(base_url=endpoint + "/v1", api_key="unused", max_retries=0)
    listed = {m.id for m in client.models.list().data}
    assert {"emb", "rr"} <= listed
    answer = client.embeddings.create(model="emb", input=["the otter swims", "a harp plays"])
    vectors = [np.array(d.embedding) for d in answer.data]
    assert len(vectors) == 2
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-3 for v in vectors)
    assert answer.usage.prompt_tokens > 0

    for query, good, bad in testmodels.sample_pairs(seed=5, count=3):
        resp = httpx.post(
            endpoint + "/v1/rerank",
            json={"model": "rr", "query": query, "documents": [bad, good]},
            timeout=60.0,
        )
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        assert results[0]["index"] == 1, (query, results)
        assert results[0]["relevance_score"] > results[1]["relevance_score"]
    # the same through the fleet's front door
    gw = gws.start_gateway(
        e2e.cluster.gateway_kubeconfig, tmp_path / "gateway", anonymous=True, fleet_key=None
    )
    try:
        front = gw.openai()
        wait_for(
            "the gateway lists emb and rr",
            lambda: {"emb", "rr"} <= {m.id for m in front.models.list().data},
        )
        via = front.embeddings.create(model="emb", input=["the otter swims", "a harp plays"])
        through = [np.array(d.embedding) for d in via.data]
        assert len(through) == len(vectors)
        assert all(np.allclose(t, v, atol=1e-6) for t, v in zip(through, vectors, strict=True))
        assert via.usage.prompt_tokens == answer.usage.prompt_tokens
        query, good, bad = testmodels.sample_pairs(seed=5, count=1)[0]
        resp = httpx.post(
            gw.url + "/v1/rerank",
            json={"model": "rr", "query": query, "documents": [bad, good], "top_n": 1},
            timeout=60.0,
        )
        assert resp.status_code == 200, resp.text
        served_by = resp.headers.get("x-mlxfleet-backend", "")
        assert served_by, resp.headers
        assert not served_by.startswith("external"), served_by
        (best,) = resp.json()["results"]
        assert best["index"] == 1
        missing = httpx.post(
            gw.url + "/v1/rerank", json={"model": "nope", "query": "q"}, timeout=30
        )
        assert missing.status_code == 404, missing.text
    finally:
        gw.stop()
    # still nothing started for the unrunnable engine, and no crash loop
    assert not any(s["name"].endswith("big") for s in a.state()["slots"])
    operator.assert_alive()

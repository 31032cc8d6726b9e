"""Engines through a real agent: embeddings and rerank slots (`mlx-embed`, `mlx-rerank`) served
by the data plane with the `openai` client and httpx, counted in telemetry; zero-drop swaps of an
embeddings slot under load; the generic `command` engine running a real `mlx_lm.server` (Ready,
answering, swapping under load); refusals of engines the node cannot run.

Models: tiny generated qwen3 embedder/reranker (dev.testmodels) and the chat dev models.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from mlxfleet_agent.dev import testmodels
from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.slow, pytest.mark.timeout(600)]


def _embed_spec(model: Path, served: str, **embed: Any) -> dict[str, Any]:
    engine: dict[str, Any] = {"name": "mlx-embed"}
    if embed:
        engine["embed"] = embed
    return slot_spec(model, served, engine=engine)


@pytest.fixture
def engines_agent(
    agent_factory: Callable[..., Agent], embedding_model: Path, reranker_model: Path
) -> Agent:
    agent = agent_factory()
    assert agent.put_slot(
        "emb", _embed_spec(embedding_model, "tiny-embed", maxInputs=8)
    ).status_code in (
        200,
        201,
        202,
    )
    rr = slot_spec(reranker_model, "tiny-rerank", engine={"name": "mlx-rerank"})
    assert agent.put_slot("rr", rr).status_code in (200, 201, 202)
    agent.wait_ready("emb")
    agent.wait_ready("rr")
    return agent


def test_state_lists_the_engines_this_agent_can_run(engines_agent: Agent) -> None:
    engines = {e["name"]: e for e in engines_agent.state()["engines"]}
    assert set(engines) == {"mlx-lm", "mlx-embed", "mlx-rerank", "vllm", "command"}
    assert engines["mlx-embed"]["available"]
    assert engines["mlx-rerank"]["available"]
    assert not engines["command"]["available"]
    assert "allow-listed" in engines["command"]["reason"]
    assert not engines["vllm"]["available"]


def test_embeddings_and_rerank_answer_through_the_agent(engines_agent: Agent) -> None:
    agent = engines_agent
    client = agent.openai(timeout=60.0)
    listed = {m.id for m in client.models.list().data}
    assert {"tiny-embed", "tiny-rerank"} <= listed

    texts = ["the otter swims", "a harp plays", "the otter swims"]
    answer = client.embeddings.create(model="tiny-embed", input=texts)
    vectors = [np.array(d.embedding) for d in answer.data]
    assert [d.index for d in answer.data] == [0, 1, 2]
    assert answer.model == "tiny-embed"
    assert len({v.shape for v in vectors}) == 1
    assert vectors[0].shape[0] > 1
    for v in vectors:
        assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-3
    assert np.allclose(vectors[0], vectors[2])
    assert not np.allclose(vectors[0], vectors[1])
    assert answer.usage.prompt_tokens > 0

    for query, good, bad in testmodels.sample_pairs(seed=11, count=4):
        resp = httpx.post(
            agent.data_url + "/v1/rerank",
            json={"model": "tiny-rerank", "query": query, "documents": [bad, good]},
            timeout=60.0,
        )
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        assert results[0]["index"] == 1, (query, results)
        assert results[0]["relevance_score"] > results[1]["relevance_score"]
    # /rerank (no /v1) is the same route
    resp = httpx.post(
        agent.data_url + "/rerank",
        json={"model": "tiny-rerank", "query": "otter", "documents": ["otter", "harp"]},
        timeout=60.0,
    )
    assert resp.status_code == 200, resp.text

    counters = agent.state()["counters"]
    assert counters["prompt_tokens_total"] >= answer.usage.prompt_tokens
    metrics = agent.api("GET", "/metrics").text
    assert 'endpoint="embeddings"' in metrics
    assert 'endpoint="rerank"' in metrics


def test_wrong_endpoint_and_limits_are_clear_refusals(engines_agent: Agent) -> None:
    agent = engines_agent
    chat = httpx.post(
        agent.data_url + "/v1/chat/completions",
        json={"model": "tiny-embed", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30.0,
    )
    assert chat.status_code == 400
    assert "does not serve /v1/chat/completions" in chat.json()["error"]["message"]
    assert "embeddings" in chat.json()["error"]["message"]
    wrong = httpx.post(
        agent.data_url + "/v1/embeddings",
        json={"model": "tiny-rerank", "input": "x"},
        timeout=30.0,
    )
    assert wrong.status_code == 400
    # maxInputs 8 on this slot: nine inputs are refused by the engine, passed on as they are
    many = httpx.post(
        agent.data_url + "/v1/embeddings",
        json={"model": "tiny-embed", "input": ["x"] * 9},
        timeout=30.0,
    )
    assert many.status_code == 413, many.text
    assert many.json()["error"]["code"] == "too_many_inputs"
    assert "8" in many.json()["error"]["message"]
    long = httpx.post(
        agent.data_url + "/v1/embeddings",
        json={"model": "tiny-embed", "input": "otter " * 20_000},
        timeout=60.0,
    )
    assert long.status_code == 400, long.text
    assert long.json()["error"]["code"] == "context_length_exceeded"


def test_engines_the_node_cannot_run_are_refused_naming_them(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory()
    vllm = agent.put_slot("v", slot_spec(model_a, "v", engine={"name": "vllm"}))
    assert vllm.status_code == 422, vllm.text
    assert "vllm" in vllm.text
    cmd = {
        "name": "command",
        "command": {
            "argv": ["llama-server", "-m", "{model}", "--host", "{host}", "--port", "{port}"],
            "capabilities": ["chat"],
            "memoryBytes": 1 << 30,
        },
    }
    refused = agent.put_slot("c", slot_spec(model_a, "c", engine=cmd))
    assert refused.status_code == 422, refused.text
    assert "command" in refused.text
    mismatched = agent.put_slot(
        "m", slot_spec(model_a, "m", engine={"name": "mlx-lm", "embed": {"maxInputs": 4}})
    )
    assert mismatched.status_code in (400, 422), mismatched.text
    assert "spec.engine.embed" in mismatched.text


class Load:
    """Workers sending requests until stopped; every failure is kept."""

    def __init__(self, call: Callable[[int], None], workers: int) -> None:
        self.call = call
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(workers)]

    def _run(self, index: int) -> None:
        while not self.stop.is_set():
            try:
                self.call(index)
                with self._lock:
                    self.ok += 1
            except Exception as exc:  # every kind of failure counts
                with self._lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def _swap(agent: Agent, name: str, spec: dict[str, Any], count: int) -> dict[str, Any]:
    resp = agent.put_slot(name, spec)
    assert resp.status_code == 202, resp.text
    return agent.wait_swap(name, count, timeout_s=240)


def test_embeddings_swap_under_load_drops_nothing(
    agent_factory: Callable[..., Agent], embedding_model: Path, embedding_model_b: Path
) -> None:
    agent = agent_factory()
    assert agent.put_slot("e", _embed_spec(embedding_model, "emb")).status_code in (200, 201, 202)
    agent.wait_ready("e")
    client = agent.openai(timeout=120.0)
    before = client.embeddings.create(model="emb", input="the otter").data[0].embedding

    def call(i: int) -> None:
        data = client.embeddings.create(model="emb", input=[f"w{i}", "the harp"]).data
        assert len(data) == 2

    with Load(call, workers=6) as load:
        time.sleep(1.0)
        surge = _swap(
            agent, "e", {**_embed_spec(embedding_model_b, "emb"), "swap": {"strategy": "surge"}}, 1
        )
        hold = _swap(
            agent, "e", {**_embed_spec(embedding_model, "emb"), "swap": {"strategy": "hold"}}, 2
        )
        time.sleep(1.0)
    assert surge["outcome"] == "Completed", surge
    assert hold["outcome"] == "Completed", hold
    assert load.failures == [], load.failures[:5]
    assert load.ok > 10
    assert surge["requestsFailed"] == 0
    assert hold["requestsFailed"] == 0
    after = client.embeddings.create(model="emb", input="the otter").data[0].embedding
    assert np.allclose(before, after, atol=2e-3)  # back on the first model
    _swap(agent, "e", _embed_spec(embedding_model_b, "emb"), 3)
    other = client.embeddings.create(model="emb", input="the otter").data[0].embedding
    assert not np.allclose(before, other, atol=2e-3)  # the swap really changed the weights


def _mlx_lm_command() -> dict[str, Any]:
    argv = [sys.executable, "-m", "mlx_lm", "server", "--model", "{model}"]
    argv += ["--host", "{host}", "--port", "{port}", "--log-level", "WARNING"]
    return {
        "name": "command",
        "command": {
            "argv": argv,
            "capabilities": ["chat", "completions"],
            "memoryBytes": 1 << 30,
            "stopSignal": "SIGINT",
            "requestModel": "path",
        },
    }


def test_command_engine_runs_mlx_lm_server_and_swaps_under_load(
    agent_factory: Callable[..., Agent], model_a: Path, model_b: Path
) -> None:
    agent = agent_factory(extra=["--allow-command", sys.executable])
    engines = {e["name"]: e for e in agent.state()["engines"]}
    assert engines["command"]["available"], engines["command"]
    spec = slot_spec(model_a, "cmd", engine=_mlx_lm_command())
    assert agent.put_slot("c", spec).status_code in (200, 201, 202)
    status = agent.wait_ready("c")
    assert status["spec"]["engine"]["name"] == "command"
    client = agent.openai(timeout=120.0)
    answer = client.chat.completions.create(
        model="cmd", messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert answer.model == "cmd"
    assert answer.choices[0].finish_reason is not None

    def call(i: int) -> None:
        done = client.completions.create(model="cmd", prompt=f"worker {i}", max_tokens=8)
        assert done.choices[0].finish_reason is not None

    with Load(call, workers=4) as load:
        time.sleep(1.0)
        record = _swap(
            agent,
            "c",
            {**slot_spec(model_b, "cmd", engine=_mlx_lm_command()), "swap": {"strategy": "surge"}},
            1,
        )
        time.sleep(1.0)
    assert record["outcome"] == "Completed", record
    assert load.failures == [], load.failures[:5]
    assert load.ok > 4
    assert record["requestsFailed"] == 0
    assert agent.slot("c")["source"] == f"file://{model_b}"

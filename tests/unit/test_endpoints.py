"""One table of OpenAI-style endpoints and one slot header, in the agent's contract (issue 27:
the table existed three times with three spellings, the agent's without `/completions`). The
agent's data plane and the gateway derive theirs from it, each keeping the name its metrics,
access log and telemetry already say (`chat.completions` on the agent, `chat/completions` on the
gateway, which is also the path it sends upstream)."""

from __future__ import annotations

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import app
from mlxfleet_gateway import proxy


def test_both_data_planes_serve_the_contracts_paths() -> None:
    assert set(app.ENDPOINTS) == set(contract.ENDPOINTS) == set(proxy.ENDPOINTS)
    assert "/completions" in app.ENDPOINTS


# path, the agent's name, the gateway's name: what their metrics and logs said before issue 27
NAMES = [
    ("/v1/chat/completions", "chat.completions", "chat/completions"),
    ("/chat/completions", "chat.completions", "chat/completions"),
    ("/v1/completions", "completions", "completions"),
    ("/completions", "completions", "completions"),
    ("/v1/embeddings", "embeddings", "embeddings"),
    ("/embeddings", "embeddings", "embeddings"),
    ("/v1/rerank", "rerank", "rerank"),
    ("/rerank", "rerank", "rerank"),
    ("/v2/rerank", "rerank", "rerank"),
]


def test_each_side_keeps_its_own_names() -> None:
    assert {path: agent for path, agent, _ in NAMES} == app.ENDPOINTS
    assert {path: gateway for path, _, gateway in NAMES} == proxy.ENDPOINTS


def test_the_agent_asks_each_endpoints_engine_for_its_capability() -> None:
    for path, capability in contract.ENDPOINTS.items():
        assert app.CAPABILITY[app.ENDPOINTS[path]] == capability.value


def test_one_slot_header() -> None:
    assert app.SLOT_HEADER is proxy.SLOT_HEADER is contract.SLOT_HEADER
    assert contract.SLOT_HEADER == b"x-mlxfleet-slot"

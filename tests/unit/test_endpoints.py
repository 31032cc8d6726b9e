"""One table of OpenAI-style endpoints and one home for header names, in the shared wire package
(issue 27: the table existed three times with three spellings, the agent's without
`/completions`; the slot header twice). The
agent's data plane and the gateway derive theirs from it, each keeping the name its metrics,
access log and telemetry already say (`chat.completions` on the agent, `chat/completions` on the
gateway, which is also the path it sends upstream)."""

from __future__ import annotations

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import app
from mlxfleet_common.wire import endpoints, headers
from mlxfleet_gateway import proxy


def test_both_data_planes_serve_the_contracts_paths() -> None:
    assert set(app.ENDPOINTS) == set(endpoints.ENDPOINTS) == set(proxy.ENDPOINTS)
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
    for path, family in endpoints.ENDPOINTS.items():
        assert app.CAPABILITY[app.ENDPOINTS[path]] == contract.Capability(family).value


def test_the_contracts_capabilities_are_the_tables_families() -> None:
    assert {c.value for c in contract.Capability} == set(endpoints.ENDPOINTS.values())


def test_header_names_as_they_were() -> None:
    """What clients, agents and dashboards read: the names must not change in the move."""
    assert headers.SLOT == b"x-mlxfleet-slot"
    assert headers.BACKEND == b"x-mlxfleet-backend"
    assert headers.QUEUE_MS == b"x-mlxfleet-queue-ms"
    assert headers.COLD_START_MS == b"x-mlxfleet-cold-start-ms"
    assert (headers.FALLBACK, headers.TRIED) == (b"x-mlxfleet-fallback", b"x-mlxfleet-tried")
    assert (headers.AUTHORIZATION, headers.RETRY_AFTER) == (b"authorization", b"retry-after")

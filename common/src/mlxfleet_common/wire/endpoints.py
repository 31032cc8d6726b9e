"""The OpenAI-style endpoints the agent's data plane and the gateway serve: one table, path ->
endpoint family (pure).

A family is what an engine answers (`mlxfleet_agent.contract.Capability`, whose values these
are): the agent asks a slot's engine for it, the gateway names its metrics after the path. Each
side keeps its own spelling of the name in its metrics and logs (the agent `chat.completions`,
the gateway `chat/completions`), derived from this table.

May import: the standard library only. Called by: the agent's contract (`Capability`) and
dataplane.app, the gateway's proxy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

CHAT: Final = "chat"  # POST /v1/chat/completions
COMPLETIONS: Final = "completions"  # POST /v1/completions
EMBEDDINGS: Final = "embeddings"  # POST /v1/embeddings
RERANK: Final = "rerank"  # POST /v1/rerank

# each path either side serves -> its family
ENDPOINTS: Final[Mapping[str, str]] = {
    "/v1/chat/completions": CHAT,
    "/chat/completions": CHAT,
    "/v1/completions": COMPLETIONS,
    "/completions": COMPLETIONS,
    "/v1/embeddings": EMBEDDINGS,
    "/embeddings": EMBEDDINGS,
    "/v1/rerank": RERANK,  # the shape Jina/Cohere/vLLM clients use (engine mlx-rerank)
    "/rerank": RERANK,
    "/v2/rerank": RERANK,
}

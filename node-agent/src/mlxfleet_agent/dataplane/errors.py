"""OpenAI-shaped errors of the data plane: `{"error": {"message", "type", "param", "code"}}`.

`RouteError` is every refusal of the data plane (bad body, unknown model, queue full, backend
unreachable...), raised anywhere in it and answered once by the app with its status; the shape
is the one the gateway answers too (`openai_proxy.OpenAIError`).
May import: the standard library, mlxfleet_common.wire (openai_proxy, headers). Called by: dataplane
(app, routing, relay, answers).
"""

from __future__ import annotations

from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire.openai_proxy import OpenAIError

RETRY_AFTER = ((header.RETRY_AFTER, b"1"),)


class RouteError(OpenAIError):
    """A request the data plane refuses; carries the OpenAI-style body."""

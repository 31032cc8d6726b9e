"""Other APIs served as chat completions: the OpenAI Responses API and Anthropic Messages.

A request in one of these shapes is translated into a chat-completion body on its way in, then
goes through the gateway's one chat path (keys, limits, routes, fallback, failover before the
first byte, metering, access log) as it is; its answer (whole, streamed or an error) is
translated on its way out by wrapping the ASGI `send` the proxy writes to. So the chat path
itself is unchanged, and a /v1/chat/completions stream pays nothing for these.

`PATHS` maps each served path to its translation class; the proxy makes one per request
(`Translation`, base.py) with the client's `send`. Modules: `base` (the send wrapper, reading chat
chunks, shared checks), `responses` (/v1/responses; its request is read in `responses_request`),
`messages` (/v1/messages).
May import: the standard library, core (errors, keys, conversations), base, responses,
responses_request, messages, mlxfleet_common.wire.openai_proxy (ASGI types, the OpenAI error).
Called by: the proxy.
"""

from __future__ import annotations

from mlxfleet_gateway.dialects import base, messages, responses

Translation = base.Translation
PATHS: dict[str, type[base.Translation]] = {
    "/v1/responses": responses.Responses,
    "/responses": responses.Responses,
    "/v1/messages": messages.Messages,
}

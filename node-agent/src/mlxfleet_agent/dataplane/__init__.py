"""The data plane: the OpenAI-compatible API on the data port, in front of the slots' backends.

`app` (raw ASGI: auth, body, routing, lease) -> `routing` (model -> route, request policy) ->
`relay` (forward, assemble whole answers: `answers`; a stream passed through, the per-event hot
path, in `streamed`; how the request went and what a hang-up does in `outcome`) -> `upstream`
(the client to the backends); `errors` is the OpenAI error shape. The ASGI plumbing, the error
shape's class and the token-counting stream scanner are shared with the gateway
(`mlxfleet_common.wire.openai_proxy`).
May import: contract, slots.lease (the narrow routing protocol, nothing else of slots),
telemetry.recorder, mlxfleet_common.wire (openai_proxy, httpclient), the standard library. Never the
control API. Called by: runtime.
"""

"""One client request on its way through the gateway, its attempt in flight, and what it sends.

`Call` is the state the proxy (plan, attempts, failover), the relay (one upstream answer to the
client) and the meter (metrics and usage) share for one request. `Exchange` is one attempt on one
origin; `liveness.Origins` keeps the ones in flight per origin, so a dead agent's attempts can be
moved (no byte sent to the client yet) or cut (streaming). An attempt comes to `DONE` (answered),
`RETRY` (failed before the client saw a byte) or `BUSY` (the upstream answered 429).
`payload` is the body an attempt sends: the client's bytes whenever nothing changes.
May import: the standard library, core, mlxfleet_common.wire (httpclient, openai_proxy),
mlxfleet_operator.api.modelroute. Called by: proxy, relay, liveness, metering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.core import errors, keys, plan
from mlxfleet_gateway.core import traits as traits_mod
from mlxfleet_operator.api import modelroute as mroute

When = mroute.FallbackWhen
USAGE_INSERT = b'{"stream_options":{"include_usage":true},'
DONE, RETRY, BUSY = "done", "retry", "busy"


class Exchange:
    """One attempt in flight on one origin (so a dead agent's attempts can be moved)."""

    __slots__ = ("origin", "response", "started")

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.response: upstream.Response | None = None
        self.started = False  # bytes went to the client: it can no longer be moved

    def track(self, response: upstream.Response) -> None:
        self.response = response

    def abort(self, reason: str) -> None:
        if self.response is not None:
            self.response.abort(reason)


@dataclass(slots=True)
class Call:
    """One client request on its way through the gateway."""

    key: keys.ApiKey
    endpoint: str
    req: traits_mod.Traits
    body: dict[str, Any]
    raw: bytes
    plan: plan.Plan
    send: asgi.Send
    t0: float
    api: str | None = None  # the API the client spoke when not the endpoint's own (responses)
    gone: bool = False
    exchange: Exchange | None = None
    served_by: str | None = None  # replica or external id
    backend: str = ""  # deployment id or external id (metrics, telemetry)
    served: str | None = None  # served name of the deployment that answered
    external: bool = False
    fallback: When | None = None
    tried: list[str] = field(default_factory=list)
    started: bool = False
    status: int = 200  # what the client was answered, once started (an upstream 4xx passed on)
    ttfb: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    last_error: errors.GatewayError | None = None
    cold_start_t0: float | None = None  # first held by the activator (a sleeping deployment)
    held_ms: float | None = None  # how long the activator held it, up to its last attempt


def payload(call: Call, model: str) -> bytes:
    """The body to send: the client's bytes when nothing changes, else re-serialised."""
    body, req = call.body, call.req
    ask_usage = req.stream and not req.include_usage
    if body.get("model") == model and not any(f in body for f in traits_mod.STRIPPED_FIELDS):
        if not ask_usage:
            return call.raw
        raw = call.raw.lstrip()
        empty = raw[1:].lstrip()[:1] == b"}"
        if "stream_options" not in body and raw.startswith(b"{") and not empty:
            return USAGE_INSERT + raw[1:]
    out = {k: v for k, v in body.items() if k not in traits_mod.STRIPPED_FIELDS}
    out["model"] = model
    if ask_usage:
        options = body.get("stream_options")
        out["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }
    return json.dumps(out).encode()

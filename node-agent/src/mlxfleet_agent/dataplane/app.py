"""The data plane: an OpenAI-compatible reverse proxy in front of the slots' backends (raw ASGI).

`GET /healthz` is liveness (the gateway's probes); `GET /health` answers as vLLM and mlx_lm do
(200 while some slot can serve), both without a credential.
Per request: authorize (the node's keys: its own from the operator and the admin's
`--data-api-keys-file`; open only when it has none and may be), read the body (bounded), route by
`model`
(chat and completions to chat engines, embeddings and rerank to the slots whose engine serves
them: `mlx-embed`, `mlx-rerank`, vllm pooling, a declared command)
against the narrow `slots.lease.Routes` protocol, check the request's KV budget against the
backend that serves (`budget`: prompt + max_tokens within contextLength, before it queues), lease
the route's backend (queueing while it is not ready) and hand it to `relay`, which forwards the
request and passes the answer back as it arrives. The lease is held until the last byte, so a
swap never cuts a request. Every refusal is an OpenAI-shaped `errors.RouteError`. Raw ASGI and
raw sockets rather than a framework and an HTTP client keep the added latency per request small.
May import: the standard library, contract, mlxfleet_common.wire (openai_proxy: ASGI plumbing;
endpoints, headers), slots.lease, telemetry.recorder, dataplane (budget, errors, outcome, relay,
routing). Never the control API.
Called by: runtime (serves it on the data port).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import budget, relay, routing
from mlxfleet_agent.dataplane import outcome as outcomes
from mlxfleet_agent.dataplane.errors import RouteError
from mlxfleet_agent.slots import lease
from mlxfleet_agent.telemetry import recorder
from mlxfleet_common.wire import endpoints
from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire import openai_proxy as asgi

NO_KEY = (
    "missing or invalid API key (this node's data plane has no key yet: the operator sends the "
    "node its own once a person approved it)"
)
# the data plane's name of each endpoint (its metrics, logs and telemetry say these)
NAMES = {
    contract.Capability.CHAT: "chat.completions",
    contract.Capability.COMPLETIONS: "completions",
    contract.Capability.EMBEDDINGS: "embeddings",
    contract.Capability.RERANK: "rerank",
}
ENDPOINTS = {
    path: NAMES[contract.Capability(family)] for path, family in endpoints.ENDPOINTS.items()
}
# what a slot's engine must serve to receive an endpoint (contract.Capability values)
CAPABILITY = {name: capability.value for capability, name in NAMES.items()}


class Keys(Protocol):
    """The data plane's view of the node's credentials (`host.credentials.NodeKeys`)."""

    @property
    def open(self) -> bool:
        """No key at all, and the data plane may serve without one."""

    @property
    def data_keys(self) -> tuple[bytes, ...]: ...

    def accepts(self, given: bytes) -> bool: ...


class DataPlane:
    """ASGI app of the data port."""

    def __init__(
        self,
        *,
        routes: lease.Routes,
        telemetry: recorder.Telemetry,
        keys: Keys,
        max_body_bytes: int,
        queue_timeout_s: float,
        hold_s: float = 5.0,
    ) -> None:
        self.routes = routes
        self.telemetry = telemetry
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self.queue_timeout_s = queue_timeout_s
        self.hold_s = hold_s  # a hung-up request mlx-lm cannot stop: then its backend restarts

    async def __call__(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] == "lifespan":
            await asgi.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if path == "/healthz":
                await asgi.send_json(send, 200, b'{"status":"ok"}')
                return
            if path == "/health":
                await self._health(send, method)
                return
            self._authorize(scope)
            endpoint = ENDPOINTS.get(path)
            if endpoint is not None and method == "POST":
                await self._complete(scope, receive, send, endpoint)
            elif path in ("/v1/models", "/models") and method == "GET":
                await asgi.send_json(send, 200, self._models_body())
            elif endpoint is not None or path in ("/v1/models", "/models"):
                raise RouteError(405, f"method {method} not allowed on {path}")
            else:
                raise RouteError(404, f"no route {path}", code="not_found")
        except RouteError as exc:
            await asgi.send_error(send, exc)
        except asgi.ClientGone:
            return

    async def _health(self, send: asgi.Send, method: str) -> None:
        """`GET /health` as vLLM and mlx_lm answer it, for load and benchmark tools that probe
        before they start: 200 while some slot serves, 503 while none does. Open, as vLLM's is,
        and it says nothing else (no model names, no counts)."""
        if method not in ("GET", "HEAD"):
            raise RouteError(405, f"method {method} not allowed on /health")
        if self.routes.serving():
            await asgi.send_json(send, 200, b'{"status":"ok"}')
        else:
            await asgi.send_json(send, 503, b'{"status":"unavailable"}')

    def _authorize(self, scope: asgi.Scope) -> None:
        keys = self.keys
        if keys.open:
            return
        given = b""
        for name, value in scope["headers"]:
            if name == header.AUTHORIZATION and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
        if not keys.accepts(given):
            raise RouteError(
                401,
                "missing or invalid API key" if keys.data_keys else NO_KEY,
                type_="authentication_error",
                code="invalid_api_key",
            )

    def _slot(self, scope: asgi.Scope) -> str | None:
        """The slot the caller names (`x-mlxfleet-slot`), honoured only when the data plane has
        keys (the node's own, which the gateway holds: `_authorize` has checked it); an open
        data plane routes by `model` only."""
        if self.keys.open:
            return None
        for name, value in scope["headers"]:
            if name == header.SLOT:  # honoured only from a caller holding a data-plane key
                return value.decode("latin-1").strip() or None
        return None

    async def _budget(
        self, body: dict[str, Any], backend: lease.Upstream | None, endpoint: str, raw: bytes
    ) -> tuple[lease.Upstream | None, int | None]:
        """The KV budget against `backend`'s model (`budget.check`: refuses a request over its
        context length); (the backend counted with, the prompt's tokens), (None, None) when
        there is nothing to count (no backend serves yet, or the endpoint generates nothing)."""
        if backend is None or endpoint not in budget.GENERATING:
            return None, None
        return backend, await budget.check(body, backend, endpoint=endpoint, size=len(raw))

    def _models_body(self) -> bytes:
        now = int(time.time())
        data = [
            {"id": name, "object": "model", "created": now, "owned_by": "mlxfleet"}
            for name in self.routes.served_names()
        ]
        return json.dumps({"object": "list", "data": data}).encode()

    async def _complete(
        self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send, endpoint: str
    ) -> None:
        t0 = time.monotonic()
        try:
            raw = await asgi.read_body(scope, receive, limit=self.max_body_bytes)
        except asgi.BodyTooLarge:
            raise RouteError(
                413, f"request body exceeds {self.max_body_bytes} bytes", code="body_too_large"
            ) from None
        routed = routing.resolve(self.routes, routing.parse(raw), slot=self._slot(scope))
        route = routed.route
        routing.check_capability(route.desired, CAPABILITY[endpoint], path=scope["path"])
        routing.check_body(routed.body, route.desired, endpoint=endpoint)
        routing.check_images(routed.body, allowed=route.desired.server.allowed_image_urls or ())
        counted, prompt_tokens = await self._budget(routed.body, route.serving(), endpoint, raw)
        held = await routing.lease(route, timeout_s=self.queue_timeout_s)
        backend = held.upstream
        if backend is not counted and endpoint in budget.GENERATING:  # none yet, or another
            try:
                _, prompt_tokens = await self._budget(routed.body, backend, endpoint, raw)
            except RouteError:
                held.release(ok=True)
                raise
        self.telemetry.request_started(route.name)
        outcome = outcomes.Outcome(held)
        try:
            await relay.forward(
                routed,
                held,
                endpoint,
                receive,
                send,
                scope=scope,
                outcome=outcome,
                t0=t0,
                prompt_tokens=prompt_tokens,
                hold_s=self.hold_s,
                size=len(raw),
            )
        except asyncio.CancelledError:  # the shutdown drain ended with this request still running
            outcome.error = "shutdown"
            await relay.cut_by_shutdown(send, outcome)
            raise
        finally:
            held.release(ok=outcome.error is None)
            self.telemetry.request_finished(
                recorder.RequestRecord(
                    slot=route.name,
                    served_name=backend.spec.served_name,
                    source=backend.spec.source,
                    endpoint=endpoint,
                    stream=routed.stream,
                    prompt_tokens=outcome.prompt_tokens,
                    completion_tokens=outcome.completion_tokens,
                    queue_wait_s=held.waited_s,
                    ttft_s=outcome.ttft_s,
                    e2e_s=time.monotonic() - t0,
                    error_kind=outcome.error,
                )
            )

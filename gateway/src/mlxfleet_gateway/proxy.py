"""The gateway's data path: an OpenAI-compatible reverse proxy (raw ASGI) over the fleet.

Per request: authenticate the API key (401), read the body (bounded, 413), resolve `model` within
the key's namespaces (404 naming nothing private; 403 for a name the key may not use), check its
limits (429 + Retry-After), plan the backend (route rule, weights, fallback chain), then attempt:
pick a replica (least outstanding, power of two choices, prefix affinity), send over a pooled
keep-alive connection, and forward the answer. Nothing reaches the client before the upstream's
first body bytes, so a refused or reset connection, a 5xx, an agent found dead, or a stream that
ends before its first byte is retried on another replica (bounded by `max_attempts` and the
retry budget) and then along the fallback chain. This module is that orchestration (plan ->
attempts -> failover) behind the ASGI entry; its parts: `calls` (the request's state, the body it
sends), `relay` (one attempt upstream, its answer to the client: whole, streamed, errors),
`liveness` (attempts in flight per origin, moved or cut when their agent goes silent), `metering`
(metrics, per-key usage), `listing` (`/v1/models`) and `activator` (requests for a sleeping
deployment wait there while it loads). `/v1/responses` and `/v1/messages` are chat completions
in other shapes: `dialects` translates the body on its way in and wraps the client's `send`, and
the request goes through this same path. The OpenAI error shape and the ASGI plumbing are shared
with the agent's data plane (`mlxfleet_common.wire.openai_proxy`), as is the HTTP client.
May import: the standard library, core, mlxfleet_common.wire (endpoints, headers,
httpclient, openai_proxy, hangup), calls, relay, liveness, metering, listing, activator, view,
shipper, metrics, dialects. Called by: server (mounts it under uvicorn; wires `origins` to the
health prober and the sweep).
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from mlxfleet_common.wire import endpoints, hangup
from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway import (
    activator,
    calls,
    dialects,
    listing,
    liveness,
    metering,
    metrics,
    relay,
    shipper,
    view,
)
from mlxfleet_gateway.core import (
    balancer,
    budget,
    budgets,
    catalog,
    conversations,
    errors,
    keys,
    limits,
    plan,
)
from mlxfleet_gateway.core import traits as traits_mod

Scope = asgi.Scope
Receive = asgi.Receive
Send = asgi.Send
When = calls.When

# the gateway's name of each endpoint is the path it sends upstream after its prefix, `/v1/`
# to an agent (its metrics and access log say these: `chat/completions`)
NAMES = {
    capability: path.removeprefix("/v1/")
    for path, capability in endpoints.ENDPOINTS.items()
    if path.startswith("/v1/")
}
ENDPOINTS = {path: NAMES[family] for path, family in endpoints.ENDPOINTS.items()}


def _client_gone(call: calls.Call) -> None:
    """The client hung up before its answer was complete: the attempt in flight is cut."""
    call.gone = True
    if call.exchange is not None:
        call.exchange.abort("client gone")


class Mounted(Protocol):
    """An ASGI app for the paths under `prefixes` (the console), asked only for paths the data
    path does not serve: nothing is added to a `/v1` request."""

    prefixes: tuple[str, ...]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...


METERED = "mlxfleet.metered"  # scope key: the request became a call (its access line is its own)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    allow_anonymous: bool = False
    max_body_bytes: int = 16 * 1024 * 1024
    max_answer_bytes: int = 64 * 1024 * 1024
    max_attempts: int = 3
    connect_timeout_s: float = 0.5
    external_connect_timeout_s: float = 5.0
    external_timeout_s: float = 600.0
    read_timeout_s: float = 600.0  # longest silence of an upstream within one answer
    move_after_s: float = 1.0  # an agent unresponsive this long: its unanswered requests move
    stream_cut_after_s: float = 10.0  # an agent unresponsive this long: its streams are cut
    affinity: bool = True
    min_affinity_chars: int = traits_mod.MIN_AFFINITY_CHARS
    # what a request without a cap reserves for an external backend (its provider's default is
    # unknown here); a deployment's requests reserve what its slots let them generate
    default_estimate_tokens: int = 256


class Proxy:
    def __init__(
        self,
        *,
        state: view.View,
        pool: upstream.Pool,
        gauges: metrics.GatewayMetrics,
        config: ProxyConfig,
        usage: shipper.Shipper | None = None,
        rate_limits: limits.Limits | None = None,
        retry_budget: budget.RetryBudget | None = None,
        spend_gate: budgets.Gate | None = None,
        mounted: Mounted | None = None,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        holder: activator.Activator | None = None,
        stored: conversations.Conversations | None = None,
    ) -> None:
        self.view = state
        self.balancer = state.balancer
        self.metrics = gauges
        self.config = config
        self.limits = rate_limits or limits.Limits()
        self.budget = retry_budget or budget.RetryBudget(now=clock())
        self.spend_gate = spend_gate or budgets.Gate()
        self.mounted = mounted  # the console and admin API (`--console`): paths nothing else serves
        self.rng = rng
        self.clock = clock
        self.relay = relay.Relay(
            pool=pool,
            balance=state.balancer,
            gauges=gauges,
            clock=clock,
            max_answer_bytes=config.max_answer_bytes,
        )
        self.origins = liveness.Origins(
            move_after_s=config.move_after_s,
            stream_cut_after_s=config.stream_cut_after_s,
            read_timeout_s=config.read_timeout_s,
            clock=clock,
        )
        self.meter = metering.Meter(gauges=gauges, usage=usage, clock=clock)
        self.activator = holder
        self.dialect_context = dialects.base.Context(
            conversations=stored or conversations.Conversations(), clock=clock
        )
        self._origins: dict[str, tuple[upstream.Origin, str]] = {}

    def key_facts(self) -> list[metrics.KeyFacts]:
        """Every API key's limit usage in this gateway and its expiry (the key gauges)."""
        now = self.clock()
        return [
            metrics.KeyFacts(
                key=key.name,
                usage=self.limits.usage(key, now=now),
                expires_at=key.spec.expires_at.timestamp() if key.spec.expires_at else None,
            )
            for key in self.view.keys.by_hash.values()
        ]

    # ---- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await asgi.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        translation = None
        try:
            dialect = dialects.PATHS.get(path)
            if dialect is not None:  # errors too go out in its shape
                translation = dialect(send, self.dialect_context)
                send = translation.send
            if path == "/healthz":
                await asgi.send_json(send, 200, b'{"status":"ok"}')
            elif path == "/readyz":
                ok = self.view.ready
                answer = b'{"ready":true}' if ok else b'{"ready":false}'
                await asgi.send_json(send, 200 if ok else 503, answer)
            elif path == "/health":  # as vLLM and mlx_lm answer it: open, says nothing more
                if method not in ("GET", "HEAD"):
                    raise errors.GatewayError(405, f"method {method} not allowed on {path}")
                ok = self.view.ready
                answer = b'{"status":"ok"}' if ok else b'{"status":"unavailable"}'
                await asgi.send_json(send, 200 if ok else 503, answer)
            elif path in ENDPOINTS or translation is not None:
                if method != "POST":
                    raise errors.GatewayError(405, f"method {method} not allowed on {path}")
                endpoint = ENDPOINTS.get(path, "chat/completions")
                await self._complete(scope, receive, send, endpoint, translation)
            elif path in ("/v1/models", "/models") or path.startswith(("/v1/models/", "/models/")):
                if method != "GET":
                    raise errors.GatewayError(405, f"method {method} not allowed on {path}")
                key = self._authenticate(scope)
                await listing.answer(send, path, key=key, names=self.view.catalog)
            elif self.mounted is not None and path.startswith(self.mounted.prefixes):
                await self.mounted(scope, receive, send)
            else:
                raise errors.GatewayError(404, f"no route {path}", code="not_found")
        except errors.GatewayError as exc:
            if METERED not in scope:  # a call's own line is written by meter.finish
                self.meter.refused(path, exc.status, exc.code)
            await asgi.send_error(send, exc)
        except asgi.ClientGone:
            return

    # ---- who is calling ------------------------------------------------------------------------

    def _authenticate(self, scope: Scope, *, api_key_header: bool = False) -> keys.ApiKey:
        token = None
        given: set[str] = set()  # `x-api-key` (Anthropic's SDK) where the endpoint takes it
        for name, value in scope["headers"]:
            if name == header.AUTHORIZATION:
                scheme, _, rest = value.decode("latin-1").partition(" ")
                token = rest.strip() if scheme.lower() == "bearer" else ""
            elif name == b"x-api-key" and api_key_header:
                given.add(value.decode("latin-1").strip())
        if given:
            if token is not None:
                given.add(token)
            if len(given) > 1:
                raise errors.GatewayError(
                    400,
                    "x-api-key and Authorization name different keys: none is chosen",
                    param="x-api-key",
                    code="ambiguous_credentials",
                )
            token = given.pop()
        if not token and self.config.allow_anonymous:  # no key: anonymous (nothing to look up)
            return keys.ANONYMOUS_KEY
        try:
            return self.view.keys.authenticate(token, now_utc=datetime.now(UTC))
        except errors.GatewayError as exc:
            if self.config.allow_anonymous and exc.code == "invalid_api_key":
                return keys.ANONYMOUS_KEY  # no key, or one we do not know: anonymous
            self.metrics.rejected.labels("unknown", "unauthorized").inc()
            raise

    # ---- one request -------------------------------------------------------------------------

    async def _complete(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        endpoint: str,
        translation: dialects.Translation | None = None,
    ) -> None:
        t0 = self.clock()
        key = self._authenticate(
            scope, api_key_header=translation is not None and translation.api_key_header
        )
        if self.spend_gate.refusals:  # a monthly budget is spent (months.MonthLedger)
            refusal = self.spend_gate.refusals.get(key.name)
            if refusal is not None:
                self.metrics.rejected.labels(key.name, "over_budget").inc()
                raise refusal
        try:
            raw = await asgi.read_body(scope, receive, limit=self.config.max_body_bytes)
        except asgi.BodyTooLarge:
            self.metrics.rejected.labels(key.name, "too_large").inc()
            raise errors.GatewayError(
                413,
                f"request body exceeds {self.config.max_body_bytes} bytes",
                code="body_too_large",
            ) from None
        body = traits_mod.parse_body(raw)
        if translation is not None:  # another API's body, as a chat completion
            body = translation.request(body, key=key)
            raw = json.dumps(body).encode()
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k.startswith(b"x-") and k != b"x-api-key"
        }
        req = traits_mod.traits(
            body, headers, endpoint=endpoint, min_affinity_chars=self.config.min_affinity_chars
        )
        found = self.view.catalog.resolve(key.scope, req.model)
        if found is None:
            self.metrics.rejected.labels(key.name, "not_found").inc()
            raise errors.model_not_found(req.model)
        if not key.may_use(req.model):
            self.metrics.rejected.labels(key.name, "forbidden").inc()
            raise errors.forbidden(req.model)
        chosen = plan.plan(found, req, rng=self.rng)
        wanted = 0  # embeddings and rerank generate nothing
        if endpoint in relay.STREAMING:  # what the slot lets it generate, not a guess
            wanted = chosen.completion_tokens(
                req.max_tokens, external_default=self.config.default_estimate_tokens
            )
        try:
            ticket = self.limits.admit(key, now=t0, estimate=req.prompt_tokens_estimate + wanted)
        except errors.GatewayError:
            self.metrics.rejected.labels(key.name, "rate_limited").inc()
            self.meter.record(key, found.namespace, req.model, "", False, rate_limited=True)
            raise
        call = calls.Call(
            key=key,
            endpoint=endpoint,
            req=req,
            body=body,
            raw=raw,
            plan=chosen,
            send=send,
            t0=t0,
            api=translation.api if translation is not None else None,
        )
        self.budget.deposit(now=t0)
        scope[METERED] = True
        unwatch = hangup.watch_disconnect(scope, receive, functools.partial(_client_gone, call))
        try:
            await self._serve(call)
        finally:
            unwatch()
            tokens = call.prompt_tokens + call.completion_tokens
            self.limits.settle(ticket, now=self.clock(), tokens=tokens)
            self.meter.finish(call)

    async def _serve(self, call: calls.Call) -> None:
        p = call.plan
        reason: When | None = When.UNAVAILABLE
        if p.primary is not None:
            reason = await self._step(call, p.primary, panic=not p.fallback)
            if reason is None:
                return
        if reason is not None and p.falls_back_on(reason) and not call.gone:
            for step in p.fallback:
                self.metrics.fallbacks.labels(f"{p.namespace}/{p.route}", str(reason)).inc()
                call.fallback = reason
                if await self._step(call, step, panic=False) is None:
                    return
        if call.gone:
            call.error = call.error or "client_gone"
            return
        failure = call.last_error
        if failure is None:
            what = p.primary.name if p.primary is not None else p.requested
            failure = errors.unavailable(f"no ready replica serves `{what}` now")
        call.error = call.error or (f"http_{failure.status}" if failure.status < 500 else "failed")
        await relay.send_error(call, failure)

    async def _step(self, call: calls.Call, step: plan.Step, *, panic: bool) -> When | None:
        """Serve the call from one backend; None when done, else why the next one may try. A
        deployment that may sleep and has no ready replica (or whose replicas all failed the
        call: it went to sleep meanwhile) holds the call in the activator until one is there."""
        target = step.target
        if isinstance(target, catalog.External):
            return await self._external(call, step, target)
        while True:
            reason = await self._replicas(call, step, target, panic=panic)
            if reason in (None, When.SATURATED) or call.gone or not target.wakeable:
                return reason
            if self.activator is None:
                return reason
            try:
                target = await self.activator.hold(call, target)
            except errors.GatewayError as exc:
                call.last_error = exc
                return When.UNAVAILABLE

    async def _replicas(
        self, call: calls.Call, step: plan.Step, target: catalog.Deployment, *, panic: bool
    ) -> When | None:
        """Attempts on the deployment's ready replicas (its starting ones when none is ready)."""
        replicas = target.replicas or target.starting
        cands = [balancer.Candidate(r.id, r.url, target.capacity, r.auth) for r in replicas]
        if not cands:
            return When.UNAVAILABLE
        if call.plan.falls_back_on(When.SATURATED) and self.balancer.saturated(
            cands, limit=call.plan.saturated_at
        ):
            return When.SATURATED
        tried: set[str] = set()
        busy = 0
        affinity = call.req.affinity if self.config.affinity else None
        for attempt in range(self.config.max_attempts):
            if attempt and not self.budget.withdraw(now=self.clock()):
                self.metrics.budget_exhausted.inc()
                break
            c = self.balancer.pick(cands, rng=self.rng, affinity=affinity, exclude=tried)
            if c is None and panic:
                c = self.balancer.pick(cands, rng=self.rng, exclude=tried, allow_ejected=True)
            if c is None:
                break
            if attempt:
                self.metrics.retries.labels("busy" if busy else "failed").inc()
            call.backend, call.served, call.external = target.id, target.served_name, False
            result = await self._attempt(call, c, local=target, step=step)
            if result == calls.DONE:
                return None
            if call.gone:
                call.error = call.error or "client_gone"
                return None
            tried.add(c.id)
            call.tried.append(c.id)
            busy += result == calls.BUSY
        if not tried:
            return When.UNAVAILABLE
        return When.SATURATED if busy == len(tried) else When.FAILED

    async def _external(
        self, call: calls.Call, step: plan.Step, target: catalog.External
    ) -> When | None:
        if target.problem is not None:
            call.last_error = errors.unavailable(
                f"backend {step.name} cannot be used: {target.problem}", code="backend_unusable"
            )
            return When.UNAVAILABLE
        c = balancer.Candidate(target.id, target.url, 1_000_000)
        if not self.balancer.healthy(c.id):
            return When.UNAVAILABLE
        call.backend, call.served, call.external = target.id, None, True
        result = await self._attempt(call, c, external=target, step=step)
        if result == calls.DONE:
            return None
        if call.gone:
            call.error = call.error or "client_gone"
            return None
        call.tried.append(c.id)
        return When.SATURATED if result == calls.BUSY else When.FAILED

    # ---- one attempt ---------------------------------------------------------------------------

    def _origin(self, url: str) -> tuple[upstream.Origin, str]:
        found = self._origins.get(url)
        if found is None:
            found = self._origins[url] = upstream.Origin.from_url(url)
        return found

    async def _attempt(
        self,
        call: calls.Call,
        c: balancer.Candidate,
        *,
        step: plan.Step,
        local: catalog.Deployment | None = None,
        external: catalog.External | None = None,
    ) -> str:
        if local is not None:  # the node's own key, its header value made once per node
            url, model, auth = c.origin, local.served_name, c.auth
            path_prefix, connect_s, head_s = "/v1/", self.config.connect_timeout_s, None
        else:
            assert external is not None
            url, model = external.url, external.model
            auth = b"Bearer " + external.api_key.encode() if external.api_key else b""
            path_prefix = "/"
            connect_s = self.config.external_connect_timeout_s
            head_s = self.config.external_timeout_s
        origin, base = self._origin(url)
        headers = [(b"content-type", relay.JSON), (b"accept", b"*/*")]
        if auth:
            headers.append((header.AUTHORIZATION, auth))
        if local is not None and local.slot and auth:  # agents honour it with their key
            headers.append((header.SLOT, local.slot.encode()))
        exchange = calls.Exchange(c.origin)
        call.exchange = exchange
        live = self.origins.inflight.setdefault(c.origin, set())
        live.add(exchange)
        self.balancer.started(c)
        m = self.metrics
        m.child(m.outstanding, c.id).inc()
        try:
            return await self.relay.exchange(
                call,
                c,
                exchange,
                origin=origin,
                path=(base + path_prefix + call.endpoint).encode(),
                headers=headers,
                payload=calls.payload(call, model),
                connect_s=connect_s,
                head_s=head_s,
                name=step.name if external is not None else c.id,
            )
        finally:
            live.discard(exchange)
            call.exchange = None
            self.balancer.finished(c)
            m.child(m.outstanding, c.id).dec()

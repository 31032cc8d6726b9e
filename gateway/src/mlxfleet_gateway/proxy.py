"""The gateway's data path: an OpenAI-compatible reverse proxy (raw ASGI) over the fleet.

Per request: authenticate the API key (401), read the body (bounded, 413), resolve `model` within
the key's namespaces (404 naming nothing private; 403 for a name the key may not use), check its
limits (429 + Retry-After), plan the backend (route rule, weights, fallback chain), then attempt:
pick a replica (least outstanding, power of two choices, prefix affinity), send over a pooled
keep-alive connection, and forward the answer. Nothing reaches the client before the upstream's
first body bytes, so a refused or reset connection, a 5xx, an agent found dead, or a stream that
ends before its first byte is retried on another replica (bounded by `max_attempts` and the
retry budget) and then along the fallback chain. Streams pass through as they arrive (whole SSE
events; only a usage event the client did not ask for is held back, because the gateway always
asks for usage to count tokens); a stream cut after it started ends with an OpenAI-style error
event and is counted as `cut`. Responses name their backend (`x-mlxfleet-backend`), a fallback
(`x-mlxfleet-fallback`) and replicas tried first (`x-mlxfleet-tried`).
The OpenAI error shape, the stream scanner and the ASGI plumbing are the agent data plane's
(`mlxfleet_agent.openai_proxy`), as are the HTTP client (`mlxfleet_agent.httpclient`) and the
stream forwarding (`mlxfleet_agent.eventpipe`: after the first event, each chunk goes from the
agent's connection callback to the client without waking the request task).
May import: the standard library, core, mlxfleet_agent (httpclient, eventpipe, openai_proxy), view,
shipper, metrics.
Called by: server (mounts it under uvicorn), health (on_dead/on_alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mlxfleet_agent import eventpipe
from mlxfleet_agent import httpclient as upstream
from mlxfleet_agent import openai_proxy as asgi
from mlxfleet_gateway import metrics, shipper, view
from mlxfleet_gateway.core import balancer, budget, catalog, errors, keys, limits, plan
from mlxfleet_gateway.core import traits as traits_mod
from mlxfleet_gateway.core import usage as usage_mod
from mlxfleet_operator.api import modelroute as mroute

log = logging.getLogger("mlxfleet_gateway.proxy")
Scope = asgi.Scope
Receive = asgi.Receive
Send = asgi.Send
When = mroute.FallbackWhen

ENDPOINTS = {
    "/v1/chat/completions": "chat/completions",
    "/chat/completions": "chat/completions",
    "/v1/completions": "completions",
    "/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/embeddings": "embeddings",
    "/v1/rerank": "rerank",  # the shape Jina/Cohere/vLLM clients use (engine mlx-rerank)
    "/rerank": "rerank",
    "/v2/rerank": "rerank",
}
STREAMING = frozenset({"chat/completions", "completions"})
JSON = b"application/json"
SLOT_HEADER = b"x-mlxfleet-slot"  # names the agent slot (fleet credential only)
H_BACKEND = b"x-mlxfleet-backend"
H_FALLBACK = b"x-mlxfleet-fallback"
H_TRIED = b"x-mlxfleet-tried"
PASS_HEADERS = frozenset({b"content-type", b"cache-control", b"x-request-id", b"openai-model"})
USAGE_INSERT = b'{"stream_options":{"include_usage":true},'


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    allow_anonymous: bool = False
    fleet_key: str | None = None  # the credential agents' data planes accept
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
    default_estimate_tokens: int = 256


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
    send: Send
    t0: float
    gone: bool = False
    exchange: Exchange | None = None
    served_by: str | None = None  # replica or external id
    backend: str = ""  # deployment id or external id (metrics, telemetry)
    served: str | None = None  # served name of the deployment that answered
    external: bool = False
    fallback: When | None = None
    tried: list[str] = field(default_factory=list)
    started: bool = False
    ttfb: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    last_error: errors.GatewayError | None = None


DONE, RETRY, BUSY = "done", "retry", "busy"


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
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = state
        self.balancer = state.balancer
        self.pool = pool
        self.metrics = gauges
        self.config = config
        self.usage = usage
        self.limits = rate_limits or limits.Limits()
        self.budget = retry_budget or budget.RetryBudget(now=clock())
        self.rng = rng
        self.clock = clock
        self.inflight: dict[str, set[Exchange]] = {}
        self.dead_since: dict[str, float] = {}
        self._origins: dict[str, tuple[upstream.Origin, str]] = {}

    # ---- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await asgi.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if path == "/healthz":
                await asgi.send_json(send, 200, b'{"status":"ok"}')
            elif path == "/readyz":
                ok = self.view.ready
                answer = b'{"ready":true}' if ok else b'{"ready":false}'
                await asgi.send_json(send, 200 if ok else 503, answer)
            elif path in ENDPOINTS:
                if method != "POST":
                    raise errors.GatewayError(405, f"method {method} not allowed on {path}")
                await self._complete(scope, receive, send, ENDPOINTS[path])
            elif path in ("/v1/models", "/models") or path.startswith(("/v1/models/", "/models/")):
                if method != "GET":
                    raise errors.GatewayError(405, f"method {method} not allowed on {path}")
                await self._models(scope, send, path)
            else:
                raise errors.GatewayError(404, f"no route {path}", code="not_found")
        except errors.GatewayError as exc:
            await asgi.send_error(send, exc)
        except asgi.ClientGone:
            return

    # ---- who is calling ------------------------------------------------------------------------

    def _authenticate(self, scope: Scope) -> keys.ApiKey:
        token = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, rest = value.decode("latin-1").partition(" ")
                token = rest.strip() if scheme.lower() == "bearer" else ""
        try:
            return self.view.keys.authenticate(token, now_utc=datetime.now(UTC))
        except errors.GatewayError as exc:
            if self.config.allow_anonymous and exc.code == "invalid_api_key":
                return keys.ANONYMOUS_KEY  # no key, or one we do not know: anonymous
            self.metrics.rejected.labels("unknown", "unauthorized").inc()
            raise

    async def _models(self, scope: Scope, send: Send, path: str) -> None:
        key = self._authenticate(scope)
        now = int(time.time())

        def entry(found: catalog.Resolved) -> dict[str, Any]:
            kind = "route" if found.route is not None else "deployment"
            return {
                "id": found.name,
                "object": "model",
                "created": now,
                "owned_by": found.namespace,
                "mlxfleet": {"namespace": found.namespace, "kind": kind},
            }

        name = path.split("/models/", 1)[1] if "/models/" in path else None
        if name:
            found = self.view.catalog.resolve(key.scope, name)
            if found is None or not key.may_use(name):
                raise errors.model_not_found(name)
            await asgi.send_json(send, 200, json.dumps(entry(found)).encode())
            return
        listed = [e for e in self.view.catalog.listed(key.scope) if key.may_use(e.name)]
        body = {"object": "list", "data": [entry(e) for e in listed]}
        await asgi.send_json(send, 200, json.dumps(body).encode())

    # ---- one request -------------------------------------------------------------------------

    async def _complete(self, scope: Scope, receive: Receive, send: Send, endpoint: str) -> None:
        t0 = self.clock()
        key = self._authenticate(scope)
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
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k.startswith(b"x-")
        }
        req = traits_mod.traits(body, headers, min_affinity_chars=self.config.min_affinity_chars)
        found = self.view.catalog.resolve(key.scope, req.model)
        if found is None:
            self.metrics.rejected.labels(key.name, "not_found").inc()
            raise errors.model_not_found(req.model)
        if not key.may_use(req.model):
            self.metrics.rejected.labels(key.name, "forbidden").inc()
            raise errors.forbidden(req.model)
        wanted = req.max_tokens or self.config.default_estimate_tokens
        estimate = req.prompt_tokens_estimate + wanted
        try:
            ticket = self.limits.admit(key, now=t0, estimate=estimate)
        except errors.GatewayError:
            self.metrics.rejected.labels(key.name, "rate_limited").inc()
            self._record_use(key, found.namespace, req.model, "", False, rate_limited=True)
            raise
        call = Call(
            key=key,
            endpoint=endpoint,
            req=req,
            body=body,
            raw=raw,
            plan=plan.plan(found, req, rng=self.rng),
            send=send,
            t0=t0,
        )
        self.budget.deposit(now=t0)
        watcher = asyncio.get_running_loop().create_task(self._watch_client(receive, call))
        try:
            await self._serve(call)
        finally:
            watcher.cancel()
            tokens = call.prompt_tokens + call.completion_tokens
            self.limits.settle(ticket, now=self.clock(), tokens=tokens)
            self._finish(call)

    async def _watch_client(self, receive: Receive, call: Call) -> None:
        await asgi.until_disconnect(receive)
        call.gone = True
        if call.exchange is not None:
            call.exchange.abort("client gone")

    async def _serve(self, call: Call) -> None:
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
        await self._send_error(call, failure)

    async def _step(self, call: Call, step: plan.Step, *, panic: bool) -> When | None:
        """Serve the call from one backend; None when done, else why the next one may try."""
        target = step.target
        if isinstance(target, catalog.External):
            return await self._external(call, step, target)
        cands = [balancer.Candidate(r.id, r.url, target.capacity) for r in target.replicas]
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
            if result == DONE:
                return None
            if call.gone:
                call.error = call.error or "client_gone"
                return None
            tried.add(c.id)
            call.tried.append(c.id)
            busy += result == BUSY
        if not tried:
            return When.UNAVAILABLE
        return When.SATURATED if busy == len(tried) else When.FAILED

    async def _external(self, call: Call, step: plan.Step, target: catalog.External) -> When | None:
        if target.problem is not None:
            call.last_error = errors.unavailable(
                f"fallback {step.name} cannot be used: {target.problem}", code="backend_unusable"
            )
            return When.UNAVAILABLE
        c = balancer.Candidate(target.id, target.url, 1_000_000)
        if not self.balancer.healthy(c.id):
            return When.UNAVAILABLE
        call.backend, call.served, call.external = target.id, None, True
        result = await self._attempt(call, c, external=target, step=step)
        if result == DONE:
            return None
        if call.gone:
            call.error = call.error or "client_gone"
            return None
        call.tried.append(c.id)
        return When.SATURATED if result == BUSY else When.FAILED

    # ---- one attempt ---------------------------------------------------------------------------

    def _origin(self, url: str) -> tuple[upstream.Origin, str]:
        found = self._origins.get(url)
        if found is None:
            found = self._origins[url] = upstream.Origin.from_url(url)
        return found

    def _payload(self, call: Call, model: str) -> bytes:
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

    async def _attempt(
        self,
        call: Call,
        c: balancer.Candidate,
        *,
        step: plan.Step,
        local: catalog.Deployment | None = None,
        external: catalog.External | None = None,
    ) -> str:
        if local is not None:
            url, model, token = c.origin, local.served_name, self.config.fleet_key
            path_prefix, connect_s, head_s = "/v1/", self.config.connect_timeout_s, None
        else:
            assert external is not None
            url, model, token = external.url, external.model, external.api_key
            path_prefix = "/"
            connect_s = self.config.external_connect_timeout_s
            head_s = self.config.external_timeout_s
        origin, base = self._origin(url)
        headers = [(b"content-type", JSON), (b"accept", b"*/*")]
        if token:
            headers.append((b"authorization", b"Bearer " + token.encode()))
        if local is not None and local.slot and token:  # agents honour it with the credential
            headers.append((SLOT_HEADER, local.slot.encode()))
        exchange = Exchange(c.origin)
        call.exchange = exchange
        live = self.inflight.setdefault(c.origin, set())
        live.add(exchange)
        self.balancer.started(c)
        m = self.metrics
        m.child(m.outstanding, c.id).inc()
        try:
            return await self._exchange(
                call,
                c,
                exchange,
                origin=origin,
                path=(base + path_prefix + call.endpoint).encode(),
                headers=headers,
                payload=self._payload(call, model),
                connect_s=connect_s,
                head_s=head_s,
                name=step.name if external is not None else c.id,
            )
        finally:
            live.discard(exchange)
            call.exchange = None
            self.balancer.finished(c)
            m.child(m.outstanding, c.id).dec()

    def _failed(self, c: balancer.Candidate, *, fatal: bool, reason: str) -> None:
        self.metrics.attempts.labels(c.id, reason).inc()
        for cid in self.balancer.failed(c, now=self.clock(), fatal=fatal, reason=reason):
            log.warning("replica ejected", extra={"replica": cid, "reason": reason})
            self.metrics.ejections.labels(cid, reason).inc()
            self.metrics.replica_up.labels(cid).set(0)

    async def _exchange(
        self,
        call: Call,
        c: balancer.Candidate,
        exchange: Exchange,
        *,
        origin: upstream.Origin,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        payload: bytes,
        connect_s: float,
        head_s: float | None,
        name: str,
    ) -> str:
        try:
            resp = await self.pool.request(
                origin,
                b"POST",
                path,
                headers=headers,
                body=payload,
                connect_timeout_s=connect_s,
                head_timeout_s=head_s,
                track=exchange.track,
            )
        except upstream.ConnectError as exc:
            self._failed(c, fatal=True, reason="connect_error")
            call.last_error = errors.upstream_failed(f"{name}: {exc}")
            return RETRY
        except upstream.ResponseError as exc:
            if call.gone:
                return RETRY
            self._failed(c, fatal=True, reason="no_answer")
            call.last_error = errors.upstream_failed(f"{name}: {exc}")
            return RETRY
        status = resp.status
        refused = c.id.startswith("external:") and status in (401, 403)
        if status >= 500 or status == 429 or refused:
            try:
                detail = await resp.read(65536)
            except upstream.ResponseError:
                detail = b""
            resp.close()
            call.last_error = _passed_error(502 if refused else status, detail, name)
            if status == 429:
                self.metrics.attempts.labels(c.id, "busy").inc()
                return BUSY
            self._failed(c, fatal=False, reason=f"http_{status}")
            return RETRY
        if call.req.stream and status == 200 and call.endpoint in STREAMING:
            return await self._stream(call, c, exchange, resp, name)
        return await self._whole(call, c, exchange, resp, name)

    def _headers(self, call: Call, resp: upstream.Response, name: str) -> list[tuple[bytes, bytes]]:
        out = [(k, v) for k, v in resp.headers if k in PASS_HEADERS]
        out.append((H_BACKEND, name.encode()))
        if call.fallback is not None:
            out.append((H_FALLBACK, str(call.fallback).encode()))
        if call.tried:
            out.append((H_TRIED, ",".join(call.tried).encode()))
        return out

    async def _whole(
        self,
        call: Call,
        c: balancer.Candidate,
        exchange: Exchange,
        resp: upstream.Response,
        name: str,
    ) -> str:
        try:
            body = await resp.read(self.config.max_answer_bytes)
        except upstream.ResponseError as exc:
            if call.gone:
                return RETRY
            self._failed(c, fatal=True, reason="broken_answer")
            call.last_error = errors.upstream_failed(f"{name}: {exc}")
            return RETRY
        self._succeeded(call, c, name)
        exchange.started = call.started = True
        call.ttfb = self.clock() - call.t0
        if resp.status < 400:
            counted = asgi.usage_of(body)
            if counted is not None:
                call.prompt_tokens, call.completion_tokens = counted
        else:
            call.error = f"http_{resp.status}"
        headers = [
            *self._headers(call, resp, name),
            (b"content-length", str(len(body)).encode()),
        ]
        if not any(k == b"content-type" for k, _ in headers):
            headers.insert(0, (b"content-type", JSON))
        await call.send({"type": "http.response.start", "status": resp.status, "headers": headers})
        await call.send({"type": "http.response.body", "body": body})
        return DONE

    async def _stream(
        self,
        call: Call,
        c: balancer.Candidate,
        exchange: Exchange,
        resp: upstream.Response,
        name: str,
    ) -> str:
        scanner = asgi.StreamScanner(forward_usage=call.req.include_usage)
        try:
            first = b""
            while not first:  # wait for the first whole event before answering the client
                chunk = await resp.read_chunk()
                if not chunk:
                    break
                first = scanner.feed(chunk)
            if not first:
                raise upstream.ResponseError(
                    "stream ended before its first event", before_response=True
                )
        except upstream.ResponseError as exc:
            resp.close()
            if call.gone:
                return RETRY
            self._failed(c, fatal=True, reason="no_first_event")
            call.last_error = errors.upstream_failed(f"{name}: {exc}")
            return RETRY
        exchange.started = call.started = True
        self._succeeded(call, c, name)
        send = call.send
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": self._headers(call, resp, name),
            }
        )
        call.ttfb = self.clock() - call.t0
        await send({"type": "http.response.body", "body": first, "more_body": True})
        try:
            if not call.gone:  # the rest goes from the agent's connection straight to the client
                await eventpipe.EventPipe(resp, send, scanner).run()
        except upstream.ResponseError as exc:
            if not call.gone:
                call.error = "cut"
                self._failed(c, fatal=True, reason="stream_cut")
                log.warning("stream cut", extra={"backend": name, "why": str(exc)})
        finally:
            resp.close()
        rest = scanner.flush()
        if rest and call.error is None and not call.gone:
            await send({"type": "http.response.body", "body": rest, "more_body": True})
        if call.gone:
            call.error = "client_gone"
        elif call.error is None and not scanner.done:
            call.error = "cut"
        if call.error == "cut":
            err = errors.upstream_failed(f"{name} stopped in the middle of this stream")
            await send({"type": "http.response.body", "body": err.event(), "more_body": True})
        call.prompt_tokens = scanner.prompt_tokens
        call.completion_tokens = scanner.completion_tokens
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return DONE

    def _succeeded(self, call: Call, c: balancer.Candidate, name: str) -> None:
        self.balancer.succeeded(c, now=self.clock())
        self.metrics.child(self.metrics.attempts, c.id, "ok").inc()
        call.served_by = name

    async def _send_error(self, call: Call, failure: errors.GatewayError) -> None:
        tried = [(H_TRIED, ",".join(call.tried).encode())] if call.tried else []
        await asgi.send_error(call.send, failure, tried)

    # ---- bookkeeping ---------------------------------------------------------------------------

    def _finish(self, call: Call) -> None:
        key, req, m = call.key, call.req, self.metrics
        outcome = "ok" if call.error is None else ("cut" if call.error == "cut" else "error")
        backend = call.backend or "none"
        m.child(m.requests, key.name, req.model, backend, outcome).inc()
        team = key.spec.team or ""
        if call.prompt_tokens:
            m.child(m.prompt_tokens, key.name, team, req.model).inc(call.prompt_tokens)
        if call.completion_tokens:
            m.child(m.completion_tokens, key.name, team, req.model).inc(call.completion_tokens)
        if call.error is not None:
            m.child(m.errors, key.name, call.error).inc()
        if call.ttfb is not None:
            m.child(m.ttft, req.model).observe(call.ttfb)
        m.child(m.duration, req.model).observe(self.clock() - call.t0)
        self._record_use(
            key,
            call.plan.namespace,
            req.model,
            backend,
            call.external,
            prompt=call.prompt_tokens,
            completion=call.completion_tokens,
            error=call.error,
            served=call.served,
        )

    def _record_use(
        self,
        key: keys.ApiKey,
        namespace: str | None,
        model: str,
        backend: str,
        external: bool,
        *,
        prompt: int = 0,
        completion: int = 0,
        error: str | None = None,
        rate_limited: bool = False,
        served: str | None = None,
    ) -> None:
        if self.usage is None:
            return
        self.usage.record(
            usage_mod.Use(
                key=key.name,
                owner=key.spec.owner,
                team=key.spec.team,
                namespace=namespace,
                model=model,
                backend=backend or "none",
                external=external,
                prompt_tokens=prompt,
                completion_tokens=completion,
                error=error,
                rate_limited=rate_limited,
                served=served,
            )
        )

    # ---- health hooks (called by the prober) --------------------------------------------------

    def on_dead(self, origin: str) -> None:
        """An agent stopped answering probes (it is already out of rotation for new requests):
        once it has been silent for `move_after_s`, move the requests still waiting for their
        first byte there; after `stream_cut_after_s`, cut its streams too. A stall shorter than
        that (a busy Mac) costs nothing but a moment out of rotation."""
        now = self.clock()
        silent = now - self.dead_since.setdefault(origin, now)
        if silent < self.config.move_after_s:
            return
        for exchange in list(self.inflight.get(origin, ())):
            if not exchange.started or silent >= self.config.stream_cut_after_s:
                exchange.abort("the agent stopped answering")

    def on_alive(self, origin: str) -> None:
        self.dead_since.pop(origin, None)

    def last_heard(self, origin: str) -> float:
        """When an exchange in flight on `origin` last received bytes (0: none in flight)."""
        latest = 0.0
        for exchange in self.inflight.get(origin, ()):
            response = exchange.response
            if response is not None and response.heard > latest:
                latest = response.heard
        return latest

    async def sweep(self, interval_s: float = 5.0) -> None:
        """Cut exchanges whose upstream has been silent longer than read_timeout_s."""
        while True:
            await asyncio.sleep(interval_s)
            edge = time.monotonic() - self.config.read_timeout_s
            for exchanges in self.inflight.values():
                for ex in list(exchanges):
                    if ex.response is not None and ex.response.idle_since < edge:
                        ex.abort(f"upstream silent for {self.config.read_timeout_s:.0f}s")


def _passed_error(status: int, detail: bytes, name: str) -> errors.GatewayError:
    """An upstream's error answer as ours (its message kept when it is OpenAI-shaped)."""
    message, code, type_ = f"{name} answered {status}", None, "server_error"
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        err = json.loads(detail)["error"]
        message = f"{name}: {err.get('message') or message}"
        code, type_ = err.get("code"), err.get("type") or type_
    if status == 429:
        return errors.GatewayError(
            429,
            message,
            type_="rate_limit_error",
            code=code or "busy",
            headers=((b"retry-after", b"1"),),
        )
    return errors.GatewayError(status, message, type_=type_, code=code or "upstream_error")

"""Relaying one attempt: send it upstream, judge the answer, pass it to the client as it arrives.

`Relay.exchange` sends one attempt over the pool and sorts the answer: a refused or reset
connection, a 5xx, an external backend refusing its key (401/403, answered as 502) or a stream
that ends before its first event is `RETRY` (nothing reached the client, the proxy may try
elsewhere), a 429 is `BUSY`; anything else is relayed and `DONE`. Whole answers are read (bounded
by `max_answer_bytes`) and sent with their token counts taken; a stream is answered at its first
whole `data:` event (comments before it, mlx-lm's `: keepalive` during the prompt, go with it),
then each chunk goes from the agent's connection callback straight to the client
(`mlxfleet_common.wire.eventpipe`, the whole loop in one call: no per-event layer here), and a
stream cut after it started ends with an OpenAI-style error event and is counted as `cut`. Every
outcome is reported to the balancer (passive health: ejections logged and counted). Answers name
their backend (`x-mlxfleet-backend`), a fallback (`x-mlxfleet-fallback`), the replicas tried first
(`x-mlxfleet-tried`) and, for a call the activator held, the cold start it waited for
(`x-mlxfleet-cold-start-ms`); `send_error` answers a call that no backend could serve.
May import: the standard library, core, calls, metrics, mlxfleet_common.wire (httpclient, eventpipe,
openai_proxy, headers). Called by: proxy.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable

from mlxfleet_common.wire import eventpipe
from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway import calls, metrics
from mlxfleet_gateway.core import balancer, errors

log = logging.getLogger("mlxfleet_gateway.proxy")  # the data path's log name, kept as it was
STREAMING = frozenset({"chat/completions", "completions"})
JSON = b"application/json"
PASS_HEADERS = frozenset({b"content-type", b"cache-control", b"x-request-id", b"openai-model"})


class Relay:
    def __init__(
        self,
        *,
        pool: upstream.Pool,
        balance: balancer.Balancer,
        gauges: metrics.GatewayMetrics,
        clock: Callable[[], float],
        max_answer_bytes: int,
    ) -> None:
        self.pool = pool
        self.balancer = balance
        self.metrics = gauges
        self.clock = clock
        self.max_answer_bytes = max_answer_bytes

    async def exchange(
        self,
        call: calls.Call,
        c: balancer.Candidate,
        exchange: calls.Exchange,
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
            self.failed(c, fatal=True, reason="connect_error")
            call.last_error = errors.upstream_failed(f"{name}: {exc}")
            return calls.RETRY
        except upstream.ResponseError as exc:
            return self.lost(call, c, name, exc, reason="no_answer")
        status = resp.status
        refused = c.id.startswith("external:") and status in (401, 403)
        if status >= 500 or status == 429 or refused:
            try:
                detail = await resp.read(65536)
            except upstream.ResponseError:
                detail = b""
            resp.close()
            call.last_error = passed_error(502 if refused else status, detail, name)
            if status == 429:
                self.metrics.attempts.labels(c.id, "busy").inc()
                return calls.BUSY
            self.failed(c, fatal=False, reason=f"http_{status}")
            return calls.RETRY
        if call.req.stream and status == 200 and call.endpoint in STREAMING:
            return await self.stream(call, c, exchange, resp, name)
        return await self.whole(call, c, exchange, resp, name)

    def failed(self, c: balancer.Candidate, *, fatal: bool, reason: str) -> None:
        self.metrics.attempts.labels(c.id, reason).inc()
        for cid in self.balancer.failed(c, now=self.clock(), fatal=fatal, reason=reason):
            log.warning("replica ejected", extra={"replica": cid, "reason": reason})
            self.metrics.ejections.labels(cid, reason).inc()
            self.metrics.replica_up.labels(cid).set(0)

    def lost(
        self,
        call: calls.Call,
        c: balancer.Candidate,
        name: str,
        exc: upstream.ResponseError,
        *,
        reason: str,
    ) -> str:
        """An answer lost before a byte reached the client: `RETRY`; the replica is ejected and the
        loss kept as `last_error` unless the client is gone (the read was cut for it: no fault)."""
        if not call.gone:
            self.failed(c, fatal=True, reason=reason)
            call.last_error = errors.upstream_failed(f"{name}: {exc}")
        return calls.RETRY

    def succeeded(self, call: calls.Call, c: balancer.Candidate, name: str) -> None:
        self.balancer.succeeded(c, now=self.clock())
        self.metrics.child(self.metrics.attempts, c.id, "ok").inc()
        call.served_by = name

    async def whole(
        self,
        call: calls.Call,
        c: balancer.Candidate,
        exchange: calls.Exchange,
        resp: upstream.Response,
        name: str,
    ) -> str:
        try:
            body = await resp.read(self.max_answer_bytes)
        except upstream.ResponseError as exc:
            return self.lost(call, c, name, exc, reason="broken_answer")
        self.succeeded(call, c, name)
        exchange.started = call.started = True
        call.ttfb = self.clock() - call.t0
        if resp.status < 400:
            counted = asgi.usage_of(body)
            if counted is not None:
                call.prompt_tokens, call.completion_tokens = counted
            else:  # an answer without usage: its prompt from the request
                call.prompt_tokens = call.req.prompt_tokens_estimate
        else:
            call.error = f"http_{resp.status}"
        call.status = resp.status
        headers = [
            *answer_headers(call, resp, name),
            (b"content-length", str(len(body)).encode()),
        ]
        if not any(k == b"content-type" for k, _ in headers):
            headers.insert(0, (b"content-type", JSON))
        await call.send({"type": "http.response.start", "status": resp.status, "headers": headers})
        await call.send({"type": "http.response.body", "body": body})
        return calls.DONE

    async def stream(
        self,
        call: calls.Call,
        c: balancer.Candidate,
        exchange: calls.Exchange,
        resp: upstream.Response,
        name: str,
    ) -> str:
        scanner = asgi.StreamScanner(forward_usage=call.req.include_usage)
        try:
            # answer the client at the first `data:` event, not at a comment: mlx-lm writes
            # `: keepalive` comments while it processes the prompt, and a replica lost then
            # must still be retried elsewhere (the client has seen nothing it could parse)
            first = b""
            while not scanner.data_events:
                chunk = await resp.read_chunk()
                if not chunk:
                    break
                first += scanner.feed(chunk)
            if not scanner.data_events:
                raise upstream.ResponseError(
                    "stream ended before its first event", before_response=True
                )
        except upstream.ResponseError as exc:
            resp.close()
            return self.lost(call, c, name, exc, reason="no_first_event")
        exchange.started = call.started = True
        self.succeeded(call, c, name)
        send = call.send
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": answer_headers(call, resp, name),
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
                self.failed(c, fatal=True, reason="stream_cut")
                log.warning("stream cut", extra={"backend": name, "why": str(exc)})
        finally:
            resp.close()
        rest = scanner.flush()
        if rest and call.error is None and not call.gone:
            await send({"type": "http.response.body", "body": rest, "more_body": True})
        if call.gone and not scanner.done:
            call.error = "client_gone"
        elif call.error is None and not scanner.done:
            call.error = "cut"
        # a client gone after `data: [DONE]` went out had the whole stream: the openai SDK closes
        # the response at [DONE], often before the chunked body's end arrives (not an error)
        if call.error == "cut":
            err = errors.upstream_failed(f"{name} stopped in the middle of this stream")
            await send({"type": "http.response.body", "body": err.event(), "more_body": True})
        # the prompt comes from the final usage event; a stream that never got there (the client
        # left, the agent was cut) still cost its prompt: counted from the request
        reported = scanner.usage_completion is not None
        call.prompt_tokens = scanner.prompt_tokens if reported else call.req.prompt_tokens_estimate
        call.completion_tokens = scanner.completion_tokens
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return calls.DONE


def answer_headers(
    call: calls.Call, resp: upstream.Response, name: str
) -> list[tuple[bytes, bytes]]:
    out = [(k, v) for k, v in resp.headers if k in PASS_HEADERS]
    out.append((header.BACKEND, name.encode()))
    if call.fallback is not None:
        out.append((header.FALLBACK, str(call.fallback).encode()))
    if call.tried:
        out.append((header.TRIED, ",".join(call.tried).encode()))
    if call.held_ms is not None:
        out.append((header.COLD_START_MS, f"{call.held_ms + _queued_ms(resp):.0f}".encode()))
    return out


def _queued_ms(resp: upstream.Response) -> float:
    """The agent's queue wait (its slot loading, for a cold start), 0 when it did not say."""
    for k, v in resp.headers:
        if k == header.QUEUE_MS:
            try:
                return float(v)
            except ValueError:
                return 0.0
    return 0.0


async def send_error(call: calls.Call, failure: errors.GatewayError) -> None:
    tried = [(header.TRIED, ",".join(call.tried).encode())] if call.tried else []
    await asgi.send_error(call.send, failure, tried)


def passed_error(status: int, detail: bytes, name: str) -> errors.GatewayError:
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
            headers=((header.RETRY_AFTER, b"1"),),
        )
    return errors.GatewayError(status, message, type_=type_, code=code or "upstream_error")

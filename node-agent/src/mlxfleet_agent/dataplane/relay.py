"""Relaying one leased request: ask the backend, pass its answer back as it arrives.

Per request: the body (already routed, `model` rewritten to the backend's pinned path and the
token cap applied) goes to the backend over `upstream`; the answer comes back unbuffered (whole
SSE events; the pinned path in `model` fields put back to the served name, the fingerprint made
opaque). Whole answers are asked for as a stream and assembled here (`answers`), so a client
that hangs up stops the generation at once. A stream whose backend dies ends with an
OpenAI-style `error` event instead of hanging; the shutdown drain's end gets one too.
`Outcome` is what the request contributes to telemetry.
May import: the standard library, slots.lease, dataplane (answers, asgi, errors, routing,
tokens, upstream). Called by: dataplane.app.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from mlxfleet_agent.dataplane import answers, asgi, routing, tokens, upstream
from mlxfleet_agent.dataplane.errors import RETRY_AFTER, RouteError
from mlxfleet_agent.slots import lease

log = logging.getLogger(__name__)
BACKEND_PATHS = {"chat.completions": "/v1/chat/completions", "completions": "/v1/completions"}
DONE = b"data: [DONE]"
BACKEND_HEADER = b"x-mlxfleet-backend"
ERROR_BODY_LIMIT = 64 * 1024  # of a backend's error body, what the client is shown


class Outcome:
    __slots__ = ("completion_tokens", "error", "prompt_tokens", "started", "streaming", "ttft_s")

    def __init__(self) -> None:
        self.error: str | None = None
        self.ttft_s: float | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.started = False  # the response head went out
        self.streaming = False

    def count_usage(self, body: bytes) -> None:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            usage = json.loads(body).get("usage") or {}
            self.prompt_tokens = int(usage.get("prompt_tokens", 0))
            self.completion_tokens = int(usage.get("completion_tokens", 0))


async def _watch_disconnect(
    receive: asgi.Receive, gone: asyncio.Event, reply: upstream.BackendReply
) -> None:
    """The client hung up: say so and drop the backend connection (that stops generation)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            reply.abort()
            return


async def cut_by_shutdown(send: asgi.Send, outcome: Outcome) -> None:
    """The shutdown drain ran out: end this request with an OpenAI-style error (503, or an
    `error` event when the stream is under way) instead of uvicorn's plain-text 500."""
    err = RouteError(
        503,
        "the agent is shutting down and this request did not finish in time; retry it",
        type_="server_error",
        code="shutting_down",
    )
    with contextlib.suppress(Exception):
        if not outcome.started:
            await asgi.send_json(send, 503, err.body(), RETRY_AFTER)
        elif outcome.streaming:
            event = b"data: " + err.body() + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def forward(
    routed: routing.Routed,
    backend: lease.Upstream,
    endpoint: str,
    receive: asgi.Receive,
    send: asgi.Send,
    *,
    outcome: Outcome,
    t0: float,
) -> None:
    """Ask the backend and pass its answer on; a client that leaves closes the backend's
    connection, which stops mlx_lm at its next write (so whole answers are asked for as a
    stream and assembled here: see `answers`)."""
    body = routed.body
    routing.limit_tokens(body, backend.spec)
    body["model"] = backend.pinned
    assemble = not routed.stream and not answers.wants_logprobs(body)
    client_usage = False
    if routed.stream:
        client_usage = tokens.ask_for_usage(body)
    elif assemble:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    served = backend.spec.served_name
    rewrite = answers.rewriter(
        pinned=backend.pinned, served=served, original_fingerprint=backend.fingerprint
    )
    headers = [(BACKEND_HEADER, f"{backend.port}".encode())]
    try:
        reply = await upstream.call_backend(
            backend.port, BACKEND_PATHS[endpoint], json.dumps(body).encode()
        )
    except upstream.BackendError as exc:
        outcome.error = "backend_unreachable"
        raise RouteError(
            502,
            f"backend unreachable: {exc}",
            type_="server_error",
            code="backend_unreachable",
        ) from exc
    gone = asyncio.Event()
    watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, gone, reply))
    try:
        if reply.status != 200:
            await _error(reply, send, headers=headers, outcome=outcome, backend=backend)
        elif routed.stream:
            await _stream(
                reply,
                send,
                headers=headers,
                rewrite=rewrite,
                outcome=outcome,
                t0=t0,
                counter=tokens.StreamCounter(forward_usage=client_usage),
                gone=gone,
            )
        elif assemble:
            await _assembled(
                reply,
                send,
                answers.Assembler(chat=endpoint == "chat.completions"),
                headers=headers,
                served=served,
                fingerprint=answers.fingerprint(backend.fingerprint or ""),
                outcome=outcome,
                t0=t0,
                gone=gone,
            )
        else:
            await _whole(
                reply, send, headers=headers, rewrite=rewrite, outcome=outcome, t0=t0, gone=gone
            )
    finally:
        watcher.cancel()
        reply.close()


async def _error(
    resp: upstream.BackendReply,
    send: asgi.Send,
    *,
    headers: list[tuple[bytes, bytes]],
    outcome: Outcome,
    backend: lease.Upstream,
) -> None:
    """A backend's refusal, OpenAI-shaped, with its status."""
    outcome.error = "backend_5xx" if resp.status >= 500 else "backend_4xx"
    try:
        raw = await resp.read_all(limit=ERROR_BODY_LIMIT)
    except upstream.BackendError:
        raw = b""
    body = answers.backend_error(
        resp.status, raw, pinned=backend.pinned, served=backend.spec.served_name
    )
    await asgi.send_whole(send, resp.status, body, headers)


async def _assembled(
    resp: upstream.BackendReply,
    send: asgi.Send,
    builder: answers.Assembler,
    *,
    headers: list[tuple[bytes, bytes]],
    served: str,
    fingerprint: str,
    outcome: Outcome,
    t0: float,
    gone: asyncio.Event,
) -> None:
    """A whole answer, built from the backend's stream."""
    try:
        async with contextlib.aclosing(resp.chunks()) as chunks:
            async for raw in chunks:
                builder.feed(raw)
                if outcome.ttft_s is None and builder.events:
                    outcome.ttft_s = time.monotonic() - t0
    except upstream.BackendError as exc:
        if not gone.is_set():
            log.warning("backend stream broke", extra={"error": str(exc)})
    outcome.prompt_tokens = builder.prompt_tokens
    outcome.completion_tokens = builder.completion_tokens
    if gone.is_set():
        outcome.error = "client_gone"
        return
    if not builder.done:
        outcome.error = "backend_died"
        raise RouteError(
            502, "backend failed while answering", type_="server_error", code="backend_died"
        )
    body = builder.result(served=served, fingerprint=fingerprint)
    outcome.started = True
    await asgi.send_whole(send, 200, body, headers)


async def _whole(
    resp: upstream.BackendReply,
    send: asgi.Send,
    *,
    headers: list[tuple[bytes, bytes]],
    rewrite: answers.Rewrite,
    outcome: Outcome,
    t0: float,
    gone: asyncio.Event,
) -> None:
    """A whole answer generated whole by the backend (requests that ask for logprobs)."""
    try:
        body = await resp.read_all()
    except upstream.BackendError:
        if gone.is_set():
            outcome.error = "client_gone"
            return
        outcome.error = "backend_died"
        raise RouteError(
            502, "backend failed while answering", type_="server_error", code="backend_died"
        ) from None
    outcome.ttft_s = time.monotonic() - t0
    body = rewrite(body)
    outcome.count_usage(body)
    outcome.started = True
    await asgi.send_whole(send, 200, body, headers, content_type=resp.content_type)


async def _stream(
    resp: upstream.BackendReply,
    send: asgi.Send,
    *,
    headers: list[tuple[bytes, bytes]],
    rewrite: answers.Rewrite,
    outcome: Outcome,
    t0: float,
    counter: tokens.StreamCounter,
    gone: asyncio.Event,
) -> None:
    outcome.started = outcome.streaming = True
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                *headers,
            ],
        }
    )
    tail = b""
    try:
        async with contextlib.aclosing(resp.chunks()) as chunks:
            async for raw in chunks:
                chunk = counter.feed(raw)  # whole SSE events; counts tokens from usage
                if outcome.ttft_s is None and b"data: {" in chunk:
                    outcome.ttft_s = time.monotonic() - t0
                tail = (tail + raw)[-32:]
                if chunk:
                    await send(
                        {
                            "type": "http.response.body",
                            "body": rewrite(chunk),
                            "more_body": True,
                        }
                    )
                if gone.is_set():
                    break
    except upstream.BackendError as exc:
        if not gone.is_set() and DONE not in tail:
            log.warning("backend stream broke", extra={"error": str(exc)})
    outcome.prompt_tokens = counter.prompt_tokens
    outcome.completion_tokens = counter.completion_tokens
    if DONE not in tail:  # a client that leaves after [DONE] got everything
        outcome.error = "client_gone" if gone.is_set() else "backend_died"
    if outcome.error == "client_gone":
        return
    rest = counter.flush()
    if rest and outcome.error is None:
        await send({"type": "http.response.body", "body": rewrite(rest), "more_body": True})
    if outcome.error == "backend_died":
        err = RouteError(
            502,
            "the backend stopped in the middle of this stream",
            type_="server_error",
            code="backend_died",
        )
        await send(
            {
                "type": "http.response.body",
                "body": b"data: " + err.body() + b"\n\n",
                "more_body": True,
            }
        )
    await send({"type": "http.response.body", "body": b"", "more_body": False})

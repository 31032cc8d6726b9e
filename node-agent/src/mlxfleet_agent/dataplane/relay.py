"""Relaying one leased request: ask the backend, pass its answer back as it arrives.

Embeddings and rerank requests are forwarded as they are (only `model` rewritten) and answered
whole; their `usage.prompt_tokens` is what telemetry counts.
Per request: the body (already routed, `model` rewritten to the backend's pinned path and the
token cap applied) goes to the backend over `upstream`; the answer comes back unbuffered (whole
SSE events; the pinned path in `model` fields put back to the served name, the fingerprint made
opaque). Whole answers are asked for as a stream and assembled here (`answers`), so a client
that hangs up stops the generation at once (a one-token answer has nothing to stop: it is asked
for whole and passed through, `nothing_to_stop`); a request mlx-lm cannot stop that way before its
first token (`routing.interruptible`) is kept on `outcome.Hold` until that token, and its backend
is declared stuck (and replaced by its slot) when it holds the backend past the grace. The lease
hears when the request went to the backend and when it answered (the slot's "busy" is judged
from it: no work per streamed event). A stream whose backend dies ends with an
OpenAI-style `error` event instead of hanging; the shutdown drain's end gets one too.
`outcome.Outcome` is what the request contributes to telemetry.
Here: the request sent, the backend's refusals, whole and assembled answers, and a stream cut at
stop strings (read in this task); a streamed answer passed through, the per-event hot path, is
`streamed`'s.
May import: the standard library, contract, slots.lease, mlxfleet_common.wire (hangup,
openai_proxy, headers), dataplane (answers, errors, outcome, routing, streamed, upstream).
Called by: dataplane.app.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import answers, routing, streamed, upstream
from mlxfleet_agent.dataplane import outcome as outcomes
from mlxfleet_agent.dataplane.errors import RETRY_AFTER, RouteError
from mlxfleet_agent.slots import lease
from mlxfleet_common.wire import hangup
from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire import openai_proxy as asgi

log = logging.getLogger(__name__)
BACKEND_PATHS = {
    "chat.completions": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "rerank": "/v1/rerank",
}
WHOLE_ONLY = frozenset({"embeddings", "rerank"})  # answered whole; no tokens generated
ERROR_BODY_LIMIT = 64 * 1024  # of a backend's error body, what the client is shown
WHOLE_PROMPT_BYTES = 4 * 1024  # mlx-lm: a one-token answer this small is asked for whole


def nothing_to_stop(body: dict[str, Any], *, mlx_lm: bool, size: int | None) -> bool:
    """Whether a whole answer gains nothing from being asked for as a stream: it ends at its
    first token (a cap of one: the shape of classification traffic), so there is nothing left to
    stop after it, and a client that leaves before it costs no more than a streamed one would:
    other engines stop a whole request on a closed connection, and mlx_lm's prompt of a body up
    to `WHOLE_PROMPT_BYTES` is short (its request is kept on `Hold` until the answer, as every
    whole answer mlx_lm cannot stop is). Stop strings the agent applies are handled by the
    caller (such a request is still assembled)."""
    cap = body.get("max_tokens")
    if type(cap) is not int or cap > 1:
        return False
    return not mlx_lm or (size is not None and size <= WHOLE_PROMPT_BYTES)


async def cut_by_shutdown(send: asgi.Send, outcome: outcomes.Outcome) -> None:
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
            await send({"type": "http.response.body", "body": err.event(), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def forward(
    routed: routing.Routed,
    held: lease.Lease,
    endpoint: str,
    receive: asgi.Receive,
    send: asgi.Send,
    *,
    scope: asgi.Scope,
    outcome: outcomes.Outcome,
    t0: float,
    prompt_tokens: int | None = None,
    hold_s: float = 5.0,
    size: int | None = None,
) -> None:
    """Ask the backend and pass its answer on; a client that leaves closes the backend's
    connection, which stops mlx_lm at its next write (so whole answers are asked for as a
    stream and assembled here: see `answers`); one mlx_lm cannot stop that way is kept on
    `Hold` (`hold_s`). `prompt_tokens`: the prompt as counted for the KV budget (a request
    without max_tokens gets the room it leaves). A request that waited in the slot's queue
    (`held.waited_s`: a cold start, a hold swap, a full slot) says how long in
    `x-mlxfleet-queue-ms` (the gateway adds it to its own wait in `x-mlxfleet-cold-start-ms`).
    `size`: the request body's length in bytes (`nothing_to_stop`). `scope`: the request's
    (the client's hang-up is heard through it: `hangup.watch_disconnect`)."""
    backend = held.upstream
    body = routed.body
    whole_only = endpoint in WHOLE_ONLY
    if not whole_only:
        routing.check_token_ids(body, backend)
        routing.limit_tokens(body, backend.spec, prompt_tokens=prompt_tokens)
    body["model"] = backend.pinned
    chat = endpoint == "chat.completions"
    mlx_lm = backend.spec.engine.name is contract.EngineName.MLX_LM
    stops = answers.take_stop(body) if mlx_lm and not whole_only else ()
    assemble = not whole_only and not routed.stream and not answers.wants_logprobs(body)
    if assemble and not stops and nothing_to_stop(body, mlx_lm=mlx_lm, size=size):
        assemble = False  # asked for whole and passed through (`_whole`): one read, no parsing
    client_usage = False
    if routed.stream:
        client_usage = asgi.ask_for_usage(body)
    elif assemble:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    stopper = answers.Stopper(stops, chat=chat) if stops and (routed.stream or assemble) else None
    served = backend.spec.served_name
    rewrite = answers.rewriter(
        pinned=backend.pinned, served=served, original_fingerprint=backend.fingerprint
    )
    headers = [(header.BACKEND, f"{backend.port}".encode())]
    if held.waited_s >= 0.001:
        headers.append((header.QUEUE_MS, f"{held.waited_s * 1000:.0f}".encode()))
    hold = None
    if not whole_only and not routing.interruptible(
        body, backend.spec, streamed=routed.stream or assemble
    ):
        hold = outcomes.Hold(held, hold_s)
        outcome.answered = asyncio.Event()
    held.sent()
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
    gone = outcomes.Gone(reply, outcome, hold)
    unwatch = hangup.watch_disconnect(scope, receive, gone)
    try:
        if reply.status != 200:
            await _error(reply, send, headers=headers, outcome=outcome, backend=backend)
        elif routed.stream and not whole_only:
            scanner = asgi.StreamScanner(
                forward_usage=client_usage,
                usage_object="chat.completion.chunk" if chat else "text_completion",
            )
            if stopper is not None:
                await _stream_to_stop(
                    reply,
                    send,
                    stopper,
                    headers=headers,
                    rewrite=rewrite,
                    outcome=outcome,
                    t0=t0,
                    scanner=scanner,
                    gone=gone,
                    prompt=_PromptCount(backend, endpoint, body),
                )
            else:
                await streamed.stream(
                    reply,
                    send,
                    headers=headers,
                    rewrite=rewrite,
                    outcome=outcome,
                    t0=t0,
                    scanner=scanner,
                    gone=gone,
                )
        elif assemble:
            await _assembled(
                reply,
                send,
                answers.Assembler(chat=chat),
                headers=headers,
                served=served,
                fingerprint=answers.fingerprint(backend.fingerprint or ""),
                outcome=outcome,
                t0=t0,
                gone=gone,
                stopper=stopper,
                prompt=_PromptCount(backend, endpoint, body),
            )
        else:
            await _whole(
                reply,
                send,
                headers=headers,
                rewrite=rewrite,
                outcome=outcome,
                t0=None if whole_only else t0,
                gone=gone,
                stops=stops,
                chat=chat,
            )
    finally:
        unwatch()
        gone.stop()
        reply.close()


async def _error(
    resp: upstream.BackendReply,
    send: asgi.Send,
    *,
    headers: list[tuple[bytes, bytes]],
    outcome: outcomes.Outcome,
    backend: lease.Upstream,
) -> None:
    """A backend's refusal, OpenAI-shaped, with its status (mlx_lm's 404s mapped: `answers`)."""
    try:
        raw = await resp.read_all(limit=ERROR_BODY_LIMIT)
    except upstream.BackendError:
        raw = b""
    err = answers.backend_error(
        resp.status,
        raw,
        pinned=backend.pinned,
        served=backend.spec.served_name,
        mlx_lm=backend.spec.engine.name is contract.EngineName.MLX_LM,
    )
    outcome.error = "backend_5xx" if err.status >= 500 else "backend_4xx"
    await asgi.send_whole(send, err.status, err.body(), (*err.headers, *headers))


async def _assembled(
    resp: upstream.BackendReply,
    send: asgi.Send,
    builder: answers.Assembler,
    *,
    headers: list[tuple[bytes, bytes]],
    served: str,
    fingerprint: str,
    outcome: outcomes.Outcome,
    t0: float,
    gone: outcomes.Gone,
    stopper: answers.Stopper | None,
    prompt: _PromptCount,
) -> None:
    """A whole answer, built from the backend's stream (cut at a stop string by `stopper`)."""
    read = resp.read_chunk
    try:
        with resp.watchdog():
            while raw := await read():
                builder.feed(raw if stopper is None else stopper.feed(raw))
                if outcome.ttft_s is None and builder.events:
                    outcome.first_token(t0)
                if stopper is not None and stopper.stopped:
                    resp.abort()  # mlx_lm stops generating at its next write
                    builder.stopped(prompt_tokens=await prompt.count(), events=stopper.events)
                    break
                if gone.is_set and outcome.ttft_s is not None:
                    break  # a request kept on hold past its prompt: closing it stops the rest
    except upstream.BackendError as exc:
        if not gone.is_set:
            log.warning("backend stream broke", extra={"error": str(exc)})
    outcome.prompt_tokens = builder.prompt_tokens
    outcome.completion_tokens = builder.completion_tokens
    if gone.is_set:
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
    outcome: outcomes.Outcome,
    t0: float | None,
    gone: outcomes.Gone,
    stops: tuple[str, ...],
    chat: bool,
) -> None:
    """A whole answer generated whole by the backend (requests that ask for logprobs;
    embeddings and rerank, which have no first token: t0 None), cut at its first stop string."""
    try:
        body = await resp.read_all()
    except upstream.BackendError:
        if gone.is_set:
            outcome.error = "client_gone"
            return
        outcome.error = "backend_died"
        raise RouteError(
            502, "backend failed while answering", type_="server_error", code="backend_died"
        ) from None
    if t0 is not None:
        outcome.first_token(t0)
    body = rewrite(body)
    if stops:
        body = answers.stop_whole(body, stops, chat=chat)
    outcome.count_usage(body)
    outcome.started = True
    await asgi.send_whole(send, 200, body, headers, content_type=resp.content_type or asgi.JSON)


class _PromptCount:
    """The prompt's token count for a generation the agent stopped at a stop string (mlx_lm's
    usage event never comes then): a one-token whole request with the same body, which mlx_lm
    answers from its prompt cache, asked only when a stop string matched."""

    __slots__ = ("backend", "body", "endpoint")

    def __init__(self, backend: lease.Upstream, endpoint: str, body: dict[str, Any]) -> None:
        self.backend, self.endpoint, self.body = backend, endpoint, body  # read only in count

    async def count(self) -> int:
        body = {**self.body, "stream": False, "max_tokens": 1}
        body.pop("stream_options", None)
        try:
            reply = await upstream.call_backend(
                self.backend.port, BACKEND_PATHS[self.endpoint], json.dumps(body).encode()
            )
            try:
                raw = await reply.read_all(limit=ERROR_BODY_LIMIT)
            finally:
                reply.close()
        except upstream.BackendError:
            return 0
        counted = asgi.usage_of(raw) if reply.status == 200 else None
        return counted[0] if counted is not None else 0


async def _stream_to_stop(
    resp: upstream.BackendReply,
    send: asgi.Send,
    stopper: answers.Stopper,
    *,
    headers: list[tuple[bytes, bytes]],
    rewrite: answers.Rewrite,
    outcome: outcomes.Outcome,
    t0: float,
    scanner: asgi.StreamScanner,
    gone: outcomes.Gone,
    prompt: _PromptCount,
) -> None:
    """A stream with stop strings (mlx-lm), read in this task (not `eventpipe`'s callback: only
    requests with `stop` pay for it) and ended at the first stop string: the backend is cut
    off there (it stops generating), and the usage event (when asked for) and `[DONE]` are the
    agent's own."""
    await streamed.start(send, headers, outcome)
    try:
        with resp.watchdog():
            while raw := await resp.read_chunk():
                chunk = stopper.feed(scanner.feed(raw))
                if outcome.ttft_s is None and stopper.events:
                    outcome.ttft_s = time.monotonic() - t0
                if chunk:
                    await send(
                        {"type": "http.response.body", "body": rewrite(chunk), "more_body": True}
                    )
                if stopper.stopped:
                    resp.abort()  # mlx_lm stops generating at its next write
                    break
    except upstream.BackendError as exc:
        if not gone.is_set and not scanner.done and not stopper.stopped:
            log.warning("backend stream broke", extra={"error": str(exc)})
    if stopper.stopped and not gone.is_set:
        outcome.prompt_tokens = await prompt.count()
        outcome.completion_tokens = stopper.events
        tail = asgi.DONE + asgi.EVENT_END
        if scanner.forward_usage:
            tail = stopper.usage_event(prompt_tokens=outcome.prompt_tokens) + tail
        await send({"type": "http.response.body", "body": rewrite(tail), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await streamed.end_stream(send, scanner, outcome, gone, rewrite)

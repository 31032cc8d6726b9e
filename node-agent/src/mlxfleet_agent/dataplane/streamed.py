"""A streamed answer passed through: the response head, the backend's SSE events read in the
request's task until the first token, then each chunk handled in the backend connection's
callback (`eventpipe`: no task wake-up per chunk): the token scan
(`openai_proxy.StreamScanner`: byte searches), the model/fingerprint rewrite (two
`bytes.replace`) and the ASGI `send`; the backend's silence is bounded by one timer per stream
(`watchdog`). This is the per-event hot path: nothing is added per streamed event. Its end
(`end_stream`: the tokens counted, what the scanner held back, an OpenAI-style `error` event
when the backend died before `[DONE]`) is shared with the stop-string stream of `relay`.
May import: the standard library, dataplane (answers, errors, outcome, upstream),
mlxfleet_common.wire (eventpipe, openai_proxy). Called by: dataplane.relay.
"""

from __future__ import annotations

import logging

from mlxfleet_agent.dataplane import answers, upstream
from mlxfleet_agent.dataplane import outcome as outcomes
from mlxfleet_agent.dataplane.errors import RouteError
from mlxfleet_common.wire import eventpipe
from mlxfleet_common.wire import openai_proxy as asgi

log = logging.getLogger(__name__)


async def end_stream(
    send: asgi.Send,
    scanner: asgi.StreamScanner,
    outcome: outcomes.Outcome,
    gone: outcomes.Gone,
    rewrite: answers.Rewrite,
) -> None:
    """A passed-through stream's end: its tokens, what the scanner held back, and an error event
    when the backend died before `[DONE]` (a client that leaves after [DONE] got it all)."""
    outcome.prompt_tokens = scanner.prompt_tokens
    outcome.completion_tokens = scanner.completion_tokens
    rest = scanner.flush()
    if not (scanner.done or asgi.DONE in rest):
        outcome.error = "client_gone" if gone.is_set else "backend_died"
    if outcome.error == "client_gone":
        return
    if rest and outcome.error is None:
        await send({"type": "http.response.body", "body": rewrite(rest), "more_body": True})
    if outcome.error == "backend_died":
        err = RouteError(
            502,
            "the backend stopped in the middle of this stream",
            type_="server_error",
            code="backend_died",
        )
        await send({"type": "http.response.body", "body": err.event(), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def stream(
    resp: upstream.BackendReply,
    send: asgi.Send,
    *,
    headers: list[tuple[bytes, bytes]],
    rewrite: answers.Rewrite,
    outcome: outcomes.Outcome,
    t0: float,
    scanner: asgi.StreamScanner,
    gone: outcomes.Gone,
) -> None:
    await start(send, headers, outcome)
    read, feed = resp.read_chunk, scanner.feed
    try:
        with resp.watchdog():
            while outcome.ttft_s is None:  # until the first data event
                raw = await read()
                if not raw:
                    break
                chunk = feed(raw)  # whole SSE events; counts tokens, holds back usage
                if b"data: {" in chunk:
                    outcome.first_token(t0)
                if chunk:
                    await send(
                        {"type": "http.response.body", "body": rewrite(chunk), "more_body": True}
                    )
            if outcome.ttft_s is not None and not gone.is_set:  # the rest: callback to client
                await eventpipe.EventPipe(resp.response, send, scanner, rewrite).run()
    except upstream.BackendError as exc:
        if not gone.is_set and not scanner.done:
            log.warning("backend stream broke", extra={"error": str(exc)})
    await end_stream(send, scanner, outcome, gone, rewrite)


async def start(
    send: asgi.Send, headers: list[tuple[bytes, bytes]], outcome: outcomes.Outcome
) -> None:
    """The head of a streamed answer (server-sent events), once per request; the outcome now
    counts as started and streaming."""
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

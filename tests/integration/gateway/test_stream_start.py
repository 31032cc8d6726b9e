"""When the gateway answers a stream: at the upstream's first `data:` event, not at a comment.

mlx-lm writes `: keepalive` comments while it processes a prompt; a replica lost then must be
retried elsewhere, because the client has received nothing it could parse. Real sockets: a
loopback server writes exactly the bytes of each case, the gateway's `Relay` reads them through
the shared pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_gateway import calls, metrics, relay
from mlxfleet_gateway.core import balancer

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
COMMENT = b": keepalive 10/400\n\n"
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@contextlib.asynccontextmanager
async def upstream_writing(body: bytes) -> AsyncIterator[upstream.Origin]:
    """A server that answers every request with HEAD and `body`, then closes the connection
    (as a SIGKILLed agent's kernel does)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + body)
            await writer.drain()
        writer.close()

    srv = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield upstream.Origin("127.0.0.1", srv.sockets[0].getsockname()[1])
    finally:
        srv.close()


async def relay_stream(body: bytes) -> tuple[str, list[dict[str, Any]], Any]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    call = SimpleNamespace(
        req=SimpleNamespace(include_usage=False, prompt_tokens_estimate=3),
        send=send,
        t0=0.0,
        gone=False,
        started=False,
        ttfb=None,
        error=None,
        last_error=None,
        fallback=None,
        tried=[],
        prompt_tokens=0,
        completion_tokens=0,
        held_ms=None,
    )
    pool = upstream.Pool()
    r = relay.Relay(
        pool=pool,
        balance=balancer.Balancer(),
        gauges=metrics.GatewayMetrics(),
        clock=lambda: 1.0,
        max_answer_bytes=1 << 20,
    )
    c = balancer.Candidate(id="ns/chat@n1", origin="http://n1", capacity=4)
    async with upstream_writing(body) as origin:
        resp = await pool.request(origin, b"POST", b"/v1/chat/completions", body=b"{}")
        outcome = await r.stream(
            cast(calls.Call, call), c, calls.Exchange("http://n1"), resp, "ns/chat@n1"
        )
    await pool.aclose()
    return outcome, sent, call


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(chunk(COMMENT), id="a comment, then the replica is gone"),
        pytest.param(chunk(COMMENT) + chunk(COMMENT), id="two comments"),
        pytest.param(chunk(COMMENT) + chunk(EVENT[:20]), id="a comment and half an event"),
    ],
)
def test_a_replica_lost_before_its_first_data_event_is_retried(body: bytes) -> None:
    outcome, sent, call = asyncio.run(asyncio.wait_for(relay_stream(body), 30))
    assert outcome == calls.RETRY
    assert sent == []  # the client was not answered: the proxy may try another replica
    assert not call.started
    assert call.last_error is not None


def test_the_answer_starts_at_the_first_data_event_with_the_comments_before_it() -> None:
    body = chunk(COMMENT) + chunk(EVENT) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    outcome, sent, call = asyncio.run(asyncio.wait_for(relay_stream(body), 30))
    assert outcome == calls.DONE
    assert sent[0]["type"] == "http.response.start"
    assert sent[1]["body"].startswith(COMMENT + EVENT)  # comments are not dropped, only held
    assert call.started
    assert call.error is None

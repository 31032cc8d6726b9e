"""The data plane's upstream client against real loopback servers: a chunked answer is relayed
as its body (not its chunk framing), a keep-alive backend has its connection reused, an HTTP/1.0
close-delimited answer (mlx_lm.server's) still reads to its end, and a refused port is an error.

Issue 9: the agent's own client read HTTP/1.0 by hand and ignored chunked encoding."""

from __future__ import annotations

import asyncio
import socket

import pytest

from mlxfleet_agent.dataplane import upstream

pytestmark = pytest.mark.timeout(30)  # the old client never ended a kept-alive chunked answer
EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]


async def _serve(answer: bytes, *, close: bool) -> tuple[asyncio.Server, int, list[int]]:
    """A loopback server answering every request with `answer`; counts its connections."""
    connections = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


def _chunked(parts: list[bytes]) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    return head + b"\r\n" + body


async def _body(port: int, *, whole: bool = False) -> tuple[int, bytes | None, bytes]:
    reply = await upstream.call_backend(port, "/v1/chat/completions", b"{}")
    try:
        if whole:
            return reply.status, reply.content_type, await reply.read_all()
        data = b"".join([chunk async for chunk in reply.chunks()])
        return reply.status, reply.content_type, data
    finally:
        reply.close()


def test_a_chunked_stream_is_relayed_as_its_body_on_one_kept_alive_connection() -> None:
    async def main() -> tuple[list[bytes], int]:
        server, port, connections = await _serve(_chunked(EVENTS), close=False)
        async with server:
            got = [(await _body(port))[2], (await _body(port, whole=True))[2]]
        return got, connections[0]

    got, connections = asyncio.run(main())
    assert got == [b"".join(EVENTS)] * 2  # no "2f\r\n" chunk sizes in what the client sees
    assert connections == 1


def test_an_http10_close_delimited_answer_reads_to_its_end() -> None:
    answer = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS)

    async def main() -> tuple[tuple[int, bytes | None, bytes], int]:
        server, port, connections = await _serve(answer, close=True)
        async with server:
            first = await _body(port)
            await _body(port)
        return first, connections[0]

    (status, content_type, body), connections = asyncio.run(main())
    assert (status, content_type, body) == (200, b"text/event-stream", b"".join(EVENTS))
    assert connections == 2  # closed by the server: nothing to reuse


def test_an_error_body_is_cut_at_the_limit() -> None:
    big = b"x" * 10_000
    answer = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)

    async def main() -> tuple[int, bytes]:
        server, port, _ = await _serve(answer, close=False)
        async with server:
            reply = await upstream.call_backend(port, "/v1/completions", b"{}")
            try:
                return reply.status, await reply.read_all(limit=100)
            finally:
                reply.close()

    assert asyncio.run(main()) == (500, b"x" * 100)


def test_a_refused_port_is_a_backend_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(upstream.BackendError):
            asyncio.run(upstream.call_backend(port, "/v1/completions", b"{}"))


async def _trickle(
    events: int, gap_s: float, finished: asyncio.Event
) -> tuple[asyncio.Server, int]:
    """A backend that streams `events` events `gap_s` apart, then falls silent (never ends the
    answer) until the client hangs up; `finished` is set when it has closed its side."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            for _ in range(events):
                writer.write(EVENTS[0])
                await writer.drain()
                await asyncio.sleep(gap_s)
            await reader.read()  # silent until the client gives up
        except ConnectionError:
            pass
        finally:
            writer.close()
            finished.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_backend_is_cut_after_its_silence_not_after_a_fixed_time() -> None:
    """One watchdog per read loop: a stream that keeps talking is never cut, however long it
    runs (6 events 0.2 s apart under a 0.6 s bound); one that falls silent is cut soon after."""

    async def main() -> tuple[int, str, float]:
        finished = asyncio.Event()
        server, port = await _trickle(6, 0.2, finished)
        async with server:
            reply = await upstream.call_backend(port, "/v1/chat/completions", b"{}")
            got, why, t0 = 0, "", asyncio.get_running_loop().time()
            try:
                async for chunk in reply.chunks(idle_timeout_s=0.6):
                    got += chunk.count(b"data:")
            except upstream.BackendError as exc:
                why = str(exc)
            took = asyncio.get_running_loop().time() - t0
            reply.close()
            await asyncio.wait_for(finished.wait(), 5)
            return got, why, took

    got, why, took = asyncio.run(main())
    assert got == 6
    assert "silent" in why
    assert 1.2 < took < 3.0  # 1.2 s of events, then cut within ~0.6-0.75 s of silence

"""The upstream client against real HTTP servers on loopback: framing, keep-alive, failures.

Each server is a plain asyncio TCP server that writes exactly the bytes a test wants (chunked,
content-length, close-delimited HTTP/1.0, broken answers), so every framing case is exercised over
real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from mlxfleet_common.wire import healthcheck
from mlxfleet_common.wire import httpclient as upstream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[upstream.Origin]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield upstream.Origin("127.0.0.1", port)
    finally:
        srv.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(srv.wait_closed(), 2)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + (await reader.readexactly(length) if length else b"")


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def collect(resp: upstream.Response) -> bytes:
    out = b""
    while chunk := await resp.read_chunk():
        out += chunk
    return out


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def test_chunked_and_content_length_on_one_kept_alive_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen = await read_request(reader)
        assert b"POST /v1/chat/completions HTTP/1.1" in seen
        assert seen.endswith(b'{"a":1}')
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for part in (b"data: one\n\n", b"data: two\n\n"):
            writer.write(chunked(part)[:-5])  # one chunk, not yet the terminator
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await read_request(reader)
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello")
        await read_request(reader)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            resp = await pool.request(origin, b"POST", b"/v1/chat/completions", body=b'{"a":1}')
            assert resp.status == 200
            assert resp.header(b"content-type") == b"text/event-stream"
            assert await collect(resp) == b"data: one\n\ndata: two\n\n"
            resp = await pool.request(origin, b"POST", b"/x", body=b"{}")
            assert (resp.status, await resp.read(100)) == (201, b"hello")
            resp = await pool.request(origin, b"GET", b"/y")
            assert (resp.status, await collect(resp)) == (204, b"")
            assert pool.connects == 1
        await pool.aclose()

    run(main())


def test_http10_close_delimited_body() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for i in range(3):
            writer.write(b"data: %d\n\n" % i)
            await writer.drain()
        writer.close()

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            resp = await pool.request(origin, b"POST", b"/s", body=b"{}")
            assert await collect(resp) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
            assert pool.idle_count(origin) == 0  # a close-delimited answer is never reused
        await pool.aclose()

    run(main())


def test_an_idle_connection_closed_by_the_server_is_replaced_transparently() -> None:
    served = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        served.append(1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive promised, then closed while idle

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            for _ in range(3):
                resp = await pool.request(origin, b"POST", b"/", body=b"{}")
                assert await resp.read(10) == b"ok"
                await asyncio.sleep(0.05)
            assert len(served) == 3
        await pool.aclose()

    run(main())


def test_refused_and_silent_servers() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def main() -> None:
        pool = upstream.Pool()
        async with server(silent) as origin:
            with pytest.raises(upstream.ResponseError) as info:
                await pool.request(origin, b"POST", b"/", body=b"{}", head_timeout_s=0.2)
            assert info.value.before_response
        with pytest.raises(upstream.ConnectError):  # the server is gone: refused
            await pool.request(origin, b"POST", b"/", body=b"{}")
        await pool.aclose()

    run(main())


def test_a_body_that_breaks_off_and_an_abort_from_elsewhere() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await read_request(reader)).split(b" ")[1]
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"a")[:-5])
        await writer.drain()
        if path == b"/cut":
            writer.transport.abort()
            return
        await reader.read()  # /hang: never finishes

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            resp = await pool.request(origin, b"POST", b"/cut", body=b"{}")
            assert await resp.read_chunk() == b"a"
            with pytest.raises(upstream.ResponseError) as info:
                await collect(resp)
            assert not info.value.before_response
            tracked: list[upstream.Response] = []
            resp = await pool.request(origin, b"POST", b"/hang", body=b"{}", track=tracked.append)
            assert tracked == [resp]
            assert await resp.read_chunk() == b"a"
            asyncio.get_running_loop().call_later(0.05, resp.abort, "agent unresponsive")
            with pytest.raises(upstream.ResponseError, match="agent unresponsive"):
                await resp.read_chunk()
        await pool.aclose()

    run(main())


def test_an_abort_before_the_answer_is_retryable() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            tracked: list[upstream.Response] = []
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, lambda: tracked[0].abort("moved"))
            with pytest.raises(upstream.ResponseError) as info:
                await pool.request(origin, b"POST", b"/", body=b"{}", track=tracked.append)
            assert info.value.before_response
            assert not info.value.by_peer
        await pool.aclose()

    run(main())


def test_a_slow_reader_gets_every_byte_of_a_large_body() -> None:
    payload = bytes(range(256)) * 40_000  # ~10 MB, above the pause threshold

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload))
        for i in range(0, len(payload), 65536):
            writer.write(payload[i : i + 65536])
            await writer.drain()
        await reader.read()

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            resp = await pool.request(origin, b"POST", b"/", body=b"{}")
            got = bytearray()
            while chunk := await resp.read_chunk():
                got += chunk
                await asyncio.sleep(0.001)
            assert bytes(got) == payload
        await pool.aclose()

    run(main())


def test_garbage_is_a_response_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def main() -> None:
        pool = upstream.Pool()
        async with server(handler) as origin:
            with pytest.raises(upstream.ResponseError):
                await pool.request(origin, b"POST", b"/", body=b"{}", head_timeout_s=5)
        await pool.aclose()

    run(main())


def test_health_checks_reuse_one_connection_and_report_every_failure() -> None:
    connections = []
    answers = iter([b"200 OK", b"200 OK", b"500 Oops", b"silence", b"200 OK"])

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"GET /healthz HTTP/1.1")
            status = next(answers)
            if status == b"silence":
                await reader.read()
                return
            writer.write(
                b"HTTP/1.1 %s\r\nTransfer-Encoding: chunked\r\n\r\n%s"
                % (status, chunked(b'{"status":"ok"}'))
            )

    async def main() -> None:
        results: list[tuple[bool, str]] = []
        done = asyncio.Event()

        def record(ok: bool, why: str) -> None:
            results.append((ok, why))
            done.set()

        async with server(handler) as origin:
            check = healthcheck.HealthCheck(origin, "/healthz", timeout_s=0.3, on_result=record)
            for _ in range(5):
                done.clear()
                check.fire()
                check.fire()  # one in flight at a time: ignored
                await asyncio.wait_for(done.wait(), 5)
            check.close()
        assert [ok for ok, _ in results] == [True, True, False, False, True]
        assert "500" in results[2][1]
        assert "no answer" in results[3][1]
        assert len(connections) == 2  # one kept alive; a new one after the silent answer
        refused = healthcheck.HealthCheck(origin, "/healthz", timeout_s=0.3, on_result=record)
        done.clear()
        refused.fire()
        await asyncio.wait_for(done.wait(), 5)
        assert results[-1][0] is False
        assert "connect" in results[-1][1]
        refused.close()

    run(main())

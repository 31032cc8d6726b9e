"""The stream forwarding both proxies use (`mlxfleet_common.wire.eventpipe`), over real sockets: an
upstream streaming server-sent events, a real uvicorn (httptools, uvloop) in front forwarding
with the pipe, and a raw client.

- a client that stops reading holds the upstream back (reading paused: the proxy does not buffer
  the stream), and once it reads again it gets every event, in order, counted exactly (event
  text that says `data:` included);
- a client whose writes fail cuts the upstream exchange, and `run` raises that failure.

Issue 9: after the first event each chunk is forwarded from the upstream connection's callback
instead of waking the request task per chunk; this keeps what the task loop gave for free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from typing import Any, cast

import pytest
import uvicorn
import uvloop

from mlxfleet_common.wire import eventpipe, httpclient
from mlxfleet_common.wire import openai_proxy as asgi

pytestmark = pytest.mark.timeout(120)
BATCH = 500  # events per upstream write


def _event(i: int) -> bytes:
    delta = {"choices": [{"delta": {"content": f"data: {i}\n\n"}}]}  # JSON escapes the newlines
    return b"data: " + json.dumps(delta).encode() + b"\n\n"


class Upstream:
    """Streams `events` SSE events (chunked) in batches; `written` says how far it got."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.written = 0  # events handed to the socket (drained)
        self.broken = asyncio.Event()  # its writes failed: the peer cut the connection

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for start in range(0, self.events, BATCH):
                part = b"".join(_event(i) for i in range(start, min(start + BATCH, self.events)))
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                self.written = min(start + BATCH, self.events)
            tail = b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}'
            tail += b"\n\ndata: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
            await writer.drain()
            await reader.read()  # until the proxy closes
        except (ConnectionError, asyncio.IncompleteReadError):
            self.broken.set()
        finally:
            writer.close()


def _app(origin: httpclient.Origin, results: list[Any]) -> Any:
    pool = httpclient.Pool()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        resp = await pool.request(origin, b"GET", b"/", head_timeout_s=10)
        scanner = asgi.StreamScanner(forward_usage=False)
        head = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        try:
            await eventpipe.EventPipe(resp, send, scanner).run()
            results.append(scanner)
        except Exception as exc:
            results.append(exc)
        finally:
            resp.close()
        await send({"type": "http.response.body", "body": scanner.flush(), "more_body": False})

    return app


async def _served(app: Any) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, http="httptools", log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn has no event for it
        await asyncio.sleep(0.01)
    return server, task, sock.getsockname()[1]


async def _slow_client_run(events: int, stall_s: float) -> tuple[tuple[int, int], bytes, list[Any]]:
    up = Upstream(events)
    upstream_srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    origin = httpclient.Origin("127.0.0.1", upstream_srv.sockets[0].getsockname()[1])
    results: list[Any] = []
    server, task, port = await _served(_app(origin, results))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        transport = cast(asyncio.Transport, writer.transport)  # a socket's: it reads too
        transport.pause_reading()  # a client that stalls
        await asyncio.sleep(stall_s / 2)  # kernel buffers fill up
        first_half = up.written
        await asyncio.sleep(stall_s / 2)
        during_stall = (first_half, up.written)
        transport.resume_reading()
        data = await asyncio.wait_for(reader.read(), 60)
        writer.close()
    finally:
        server.should_exit = True
        await task
        upstream_srv.close()
    return during_stall, data, results


def test_a_stalled_client_holds_the_upstream_back_and_then_gets_every_event() -> None:
    events = 400_000  # about 34 MB of events
    during_stall, data, results = uvloop.run(_slow_client_run(events, stall_s=2.0))
    # without backpressure the proxy reads the whole stream into memory within the stall;
    # with it the upstream stops once the sockets' buffers are full
    first_half, second_half = during_stall
    assert second_half == first_half < events, f"upstream went on while stalled: {during_stall}"
    body = _dechunk(data)
    assert body.count(b'data: {"choices": [{"delta"') == events
    found = [int(x.split(b"data: ")[1].split(b"\\n")[0]) for x in body.split(b'"content": "')[1:]]
    assert found == list(range(events))
    assert b"usage" not in body  # held back: the client did not ask for usage
    assert body.endswith(b"data: [DONE]\n\n")
    (scanner,) = results
    assert isinstance(scanner, asgi.StreamScanner)
    assert scanner.data_events == events + 2  # events + usage + [DONE]
    assert (scanner.prompt_tokens, scanner.completion_tokens) == (3, 7)


def _dechunk(data: bytes) -> bytes:
    _, _, rest = data.partition(b"\r\n\r\n")
    out = []
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2 :]
    return b"".join(out)


async def _failing_send_run() -> tuple[BaseException | None, bool, int]:
    up = Upstream(200_000)
    upstream_srv = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    origin = httpclient.Origin("127.0.0.1", upstream_srv.sockets[0].getsockname()[1])
    pool = httpclient.Pool()
    sent = [0]

    async def send(message: asgi.Message) -> None:
        sent[0] += 1
        if sent[0] == 3:
            raise OSError("client socket broke")

    resp = await pool.request(origin, b"GET", b"/", head_timeout_s=10)
    error: BaseException | None = None
    try:
        await eventpipe.EventPipe(resp, send, asgi.StreamScanner(forward_usage=True)).run()
    except OSError as exc:
        error = exc
    finally:
        resp.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(up.broken.wait(), 10)
    upstream_srv.close()
    return error, up.broken.is_set(), sent[0]


def test_a_failed_client_write_cuts_the_upstream_and_is_raised() -> None:
    error, upstream_cut, sends = uvloop.run(_failing_send_run())
    assert isinstance(error, OSError)
    assert "client socket broke" in str(error)
    assert sends == 3  # nothing is sent after the failure
    assert upstream_cut  # the upstream's writes failed: its connection was closed

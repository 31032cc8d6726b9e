"""The floor the gateway is measured against: the least a Python proxy can do per streamed event.

    python -m benchmarks.floor_proxy PORT UPSTREAM_URL KEY

A raw ASGI app under the same server stack as the gateway (uvicorn + httptools + uvloop) that
forwards each request to one upstream over a fresh plain asyncio stream and writes every chunk it
reads back as it is: no routing, no parsing of the answer, no counting, no pooling. Used only by
`benchmarks.gateway_bench` to show what part of the gateway's cost per event is its own.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import uvloop

from mlxfleet_gateway import server

Message = MutableMapping[str, Any]


Send = Callable[[Message], Any]
Handler = Callable[[Message, bytes, Send], Awaitable[None]]
# the head of every streamed answer the benchmark relays send
STREAM_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream")],
}


def http_app(handle: Handler) -> Any:
    """An ASGI app that reads each HTTP request's whole body and hands scope, body and `send`
    to `handle` (lifespan and other scopes are ignored)."""

    async def app(scope: Message, receive: Callable[[], Awaitable[Message]], send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await handle(scope, body, send)

    return app


def app_for(host: str, port: int, key: str) -> Any:
    async def forward(scope: Message, body: bytes, send: Send) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (scope["path"].encode(), host.encode(), key.encode(), len(body), body)
        )
        await reader.readuntil(b"\r\n\r\n")
        await send(STREAM_START)
        while chunk := await reader.read(65536):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        writer.close()

    return http_app(forward)


async def main(port: int, upstream: str, key: str) -> None:
    parts = urlsplit(upstream)
    srv = server._uvicorn(app_for(parts.hostname or "", parts.port or 80, key), drain_s=1)
    sock = server.bind("127.0.0.1", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    task = asyncio.get_running_loop().create_task(srv.serve(sockets=[sock]))
    await stop.wait()
    srv.should_exit = True
    await task


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))

"""The product's uvicorn server (`wire.serving.Server`) on a real socket: it ticks once a second
instead of ten times, still refreshes its Date header, and a shutdown does not wait for a tick."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import uvicorn

from mlxfleet_common.wire import serving


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    return sock


class _Counting(serving.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


async def _get(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    return answer


def _date(answer: bytes) -> bytes:
    for line in answer.split(b"\r\n"):
        if line.lower().startswith(b"date:"):
            return line
    raise AssertionError(f"no Date header in {answer!r}")


def test_ticks_once_a_second_and_stops_without_waiting_for_a_tick() -> None:
    async def run() -> None:
        sock = _listening()
        port = sock.getsockname()[1]
        server = _Counting(uvicorn.Config(_app, log_config=None, lifespan="off", ws="none"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn has no event for it
            await asyncio.sleep(0.01)
        first = _date(await _get(port))
        await asyncio.sleep(2.3)
        second = _date(await _get(port))
        assert second != first, "the Date header was not refreshed within 2.3 s"
        # uvicorn's own server ticks ten times a second: 23 or more here
        assert 2 <= server.ticks <= 4, server.ticks
        stop = time.monotonic()
        server.should_exit = True
        await task
        # uvicorn's shutdown itself sleeps 0.1 s; a missed wake-up would wait for the 1 s tick
        assert time.monotonic() - stop < 0.6

    asyncio.run(run())


def test_exit_asked_before_it_serves_stops_at_once() -> None:
    async def run() -> None:
        server = serving.Server(uvicorn.Config(_app, log_config=None, lifespan="off", ws="none"))
        server.should_exit = True
        sock = _listening()
        start = time.monotonic()
        await asyncio.wait_for(server.serve(sockets=[sock]), 5)
        assert time.monotonic() - start < 0.6

    asyncio.run(run())

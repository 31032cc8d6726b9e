"""`connlimits.protocol(head_with_body=True)` (the gateway's port): an answer's head goes out in
one socket write with its first body bytes; an app that answers its head and waits has it sent
at the loop's next turn; a stream's later parts are written straight to the transport. Driven
through uvicorn's own protocol with an in-memory transport (no socket), as
tests/unit/agent/test_connlimits_uvicorn.py does."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from mlxfleet_common.wire import connlimits

App = Callable[[Any, Any, Any], Awaitable[None]]
REQUEST = b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}


class Transport(asyncio.Transport):
    """Each write kept apart, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def serve_one(app: App, *, head_with_body: bool) -> tuple[Transport, Any]:
    """One request through the port's protocol to `app`; the transport and the answer's cycle."""
    loop = asyncio.new_event_loop()
    try:
        cls = connlimits.protocol(
            max_header_bytes=1024,
            header_timeout_s=5,
            body_timeout_s=5,
            max_connections=4,
            head_with_body=head_with_body,
        )
        config = Config(app=app, http=cls, log_config=None, lifespan="off")
        config.load()
        proto = cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        transport = Transport()
        proto.connection_made(transport)
        proto.data_received(REQUEST)
        cycle = proto.cycle
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        loop.run_until_complete(asyncio.gather(*pending))
        loop.run_until_complete(asyncio.sleep(0))  # a held head's turn
        proto.connection_lost(None)
        return transport, cycle
    finally:
        loop.close()


async def whole(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send(START)
    await send({"type": "http.response.body", "body": b"hello"})


async def streamed(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for part in (b"one", b"two"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def head_then_wait(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send(START)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.mark.parametrize("head_with_body", [True, False], ids=["head-with-body", "as-uvicorn"])
def test_a_whole_answer_is_one_write(head_with_body: bool) -> None:
    transport, _ = serve_one(whole, head_with_body=head_with_body)
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"".join(transport.writes).endswith(b"\r\n\r\nhello")
    assert len(transport.writes) == (1 if head_with_body else 2)


def test_a_stream_writes_its_head_with_its_first_part_then_each_part_itself() -> None:
    transport, cycle = serve_one(streamed, head_with_body=True)
    first, *rest = transport.writes
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert first.endswith(b"\r\n\r\n3\r\none\r\n")
    assert rest == [b"3\r\ntwo\r\n", b"0\r\n\r\n"]
    assert cycle.transport is transport  # the later parts: no layer between


def test_a_head_the_app_waits_after_goes_out_at_the_next_turn() -> None:
    transport, _ = serve_one(head_then_wait, head_with_body=True)
    head, body = transport.writes
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert head.endswith(b"\r\n\r\n")
    assert body == b"hello"

"""`connlimits.protocol(head_with_body=True)` (the gateway's port): an answer's head goes out in
one socket write with its first body bytes; an app that answers its head and waits has it sent
at the loop's next turn; a stream's later parts are written straight to the transport. Driven
through uvicorn's own protocol with an in-memory transport (no socket: tests/support/
uvicornport.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support import uvicornport

START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}


def serve_one(app: uvicornport.App, *, head_with_body: bool) -> tuple[uvicornport.Transport, Any]:
    """One request through the port's protocol to `app`; the transport and the answer's cycle."""
    with uvicornport.event_loop() as loop:
        proto, transport = uvicornport.connect(loop, app, head_with_body=head_with_body)
        proto.data_received(uvicornport.REQUEST)
        cycle = proto.cycle
        uvicornport.finish(loop)
        loop.run_until_complete(asyncio.sleep(0))  # a held head's turn
        proto.connection_lost(None)
        return transport, cycle


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
    assert transport.written.startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.written.endswith(b"\r\n\r\nhello")
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

"""`connlimits` subclasses uvicorn's private `HttpToolsProtocol` (issue 28 item 8): these tests
drive the subclass through uvicorn's own parser callbacks with an in-memory transport (no
socket: tests/support/uvicornport.py), so a uvicorn release that renames a hook, changes its
signature or stops calling it fails here, loudly, before a port silently loses its limits.
pyproject.toml pins an upper bound; raise it only after this file passes on the new release.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tests.support import uvicornport

WHAT = (
    f"uvicorn {uvicorn.__version__} changed the private HttpToolsProtocol interface that "
    "mlxfleet_common.wire.connlimits subclasses: review connlimits.LimitedHttpToolsProtocol "
    "against this release before widening the uvicorn bound in pyproject.toml"
)

# The hooks connlimits overrides, with the parameters uvicorn passes them.
HOOKS = {
    "__init__": ["self", "config", "server_state", "app_state", "_loop"],
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
    "send_400_response": ["self", "msg"],
}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    with uvicornport.event_loop() as loop:
        yield loop


def _answer(transport: uvicornport.Transport) -> tuple[int, dict[str, Any]]:
    head, _, body = transport.written.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_the_hooks_connlimits_overrides_keep_their_signature(hook: str) -> None:
    base = getattr(HttpToolsProtocol, hook, None)
    assert base is not None, f"{WHAT}: {hook} is gone"
    assert list(inspect.signature(base).parameters) == HOOKS[hook], f"{WHAT}: {hook}"


def test_two_authorization_headers_are_refused_through_the_parser(
    loop: asyncio.AbstractEventLoop,
) -> None:
    proto, transport = uvicornport.connect(loop)
    proto.data_received(
        b"GET / HTTP/1.1\r\nhost: x\r\nauthorization: a\r\nauthorization: b\r\n\r\n"
    )
    assert transport.written, f"{WHAT}: on_headers_complete/send_400_response not called"
    status, body = _answer(transport)
    assert (status, body["error"]["code"]) == (400, "ambiguous_credentials"), WHAT
    assert transport.closed


def test_an_unparseable_head_gets_the_ports_error_body(loop: asyncio.AbstractEventLoop) -> None:
    proto, transport = uvicornport.connect(loop)
    proto.data_received(b"\x00\x01 not http\r\n\r\n")
    status, body = _answer(transport)
    assert (status, body["error"]["code"]) == (400, "malformed_request"), WHAT


def test_a_head_over_the_limit_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    proto, transport = uvicornport.connect(loop)
    proto.data_received(b"GET / HTTP/1.1\r\nx-pad: " + b"a" * 2048)
    status, body = _answer(transport)
    assert (status, body["error"]["code"]) == (431, "request_head_too_large"), WHAT


def test_one_connection_over_the_cap_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    _, transport = uvicornport.connect(loop, open_already=4)
    status, body = _answer(transport)
    assert (status, body["error"]["code"]) == (503, "too_many_connections"), WHAT
    assert b"retry-after: 1" in transport.written


def test_the_state_the_body_deadline_reads_is_where_connlimits_looks(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The body deadline reads `flow.read_paused` and `cycle.response_started`; a waiting body
    arms the timer, and its expiry answers 408."""
    proto, transport = uvicornport.connect(loop)
    proto.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n")
    assert isinstance(proto.flow.read_paused, bool), WHAT
    assert proto.cycle.response_started is False, WHAT
    assert proto._in_body, WHAT
    assert proto._timer is not None, WHAT
    proto._timer.cancel()
    proto._timed_out()
    status, body = _answer(transport)
    assert (status, body["error"]["code"]) == (408, "request_body_timeout"), WHAT

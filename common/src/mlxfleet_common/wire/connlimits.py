"""Limits on what a client may hold or send before an app sees its request, for every port of
the product served by uvicorn (the agent's data and control ports, the gateway's OpenAI port).

uvicorn's httptools protocol bounds neither the size of a request head nor the time a client
may take to send it or its body (its keep-alive timer only runs between requests, and
`limit_concurrency` answers 503 only once a head is complete), so a client could grow the
process by sending endless headers or hold sockets open without a word. `protocol(...)` returns
the httptools protocol with:

- a header size limit: a request head (request line + headers) longer than `max_header_bytes`
  is answered 431 and the connection closed; what is buffered stays within the limit plus one
  socket read (256 KiB);
- a header-read timeout: a connection that has not sent a whole head `header_timeout_s` after it
  opened (or after the first byte of its next request) is answered 408 and closed;
- a body-read deadline: a request whose body is not complete `body_timeout_s` after its head is
  answered 408 (or only closed, when the app has already answered) and closed; time the app
  leaves the body unread (reading paused) does not count against the client;
- a connection cap: a connection beyond `max_connections` open ones is answered 503 with
  `Retry-After` and closed at once;
- one set of credentials: a head with more than one `Authorization` header is answered 400
  (which one counts would be up to each reader; none is chosen);
- uvicorn's plain-text 400 for a head it cannot parse answered with the port's error body.

Each answer is the port's JSON error body (`ErrorBody`: `openai_body` on the OpenAI-compatible
ports), with a `Refusal` code, and closes the connection.

With `head_with_body=True` (the gateway's port) an answer's head goes out in one write with its
first body bytes: uvicorn writes the head at `http.response.start` and each body part apart, so a
whole answer cost two socket writes where one does (a one-token answer spends a good part of a
proxy's CPU in those writes). The head is held until the answer's first body write, or the event
loop's next turn when none comes in this one (an app that answers its head and waits sends it
then); after that the answer writes straight to the socket, as before (nothing per streamed
event).

Each request's scope carries `hangup.GONE`: the app hands it a callback to be called
(soon, once) when the client hangs up before its answer is complete (`hangup.
watch_disconnect`), which the connection's `connection_lost` does, as uvicorn tells a pending
`receive()`: a request in flight needs no task waiting on `receive()` for that. The hook is
the request's own (bound to its cycle, one per request, nothing per streamed event), so a
pipelined request is heard even when the one before stops watching after it began.

Shared by the agent and the gateway (mlxfleet_common.wire imports neither: an import-linter
contract). May import: uvicorn, openai_proxy, hangup, headers, the standard library. Called
by: the agent's runtime.serve (both ports), the gateway's server.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import weakref
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire.hangup import GONE
from mlxfleet_common.wire.openai_proxy import OpenAIError


class Refusal(enum.Enum):
    """Why a connection was answered and closed before any app saw the request (the `code`)."""

    TOO_MANY_CONNECTIONS = "too_many_connections"
    HEAD_TOO_LARGE = "request_head_too_large"
    HEAD_TIMEOUT = "request_head_timeout"
    BODY_TIMEOUT = "request_body_timeout"
    AMBIGUOUS_CREDENTIALS = "ambiguous_credentials"
    MALFORMED = "malformed_request"

    @property
    def status(self) -> int:
        return _STATUS[self]


_STATUS = {
    Refusal.TOO_MANY_CONNECTIONS: 503,
    Refusal.HEAD_TOO_LARGE: 431,
    Refusal.HEAD_TIMEOUT: 408,
    Refusal.BODY_TIMEOUT: 408,
    Refusal.AMBIGUOUS_CREDENTIALS: 400,
    Refusal.MALFORMED: 400,
}
REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}

ErrorBody = Callable[[Refusal, str], bytes]
"""(refusal, message) -> the JSON error body of the port (OpenAI-shaped or the control API's)."""


def openai_body(refusal: Refusal, message: str) -> bytes:
    """The OpenAI error shape of an OpenAI-compatible port (agent data plane, gateway)."""
    busy = refusal is Refusal.TOO_MANY_CONNECTIONS
    kind = "rate_limit_error" if busy else "invalid_request_error"
    param = "authorization" if refusal is Refusal.AMBIGUOUS_CREDENTIALS else None
    return OpenAIError(refusal.status, message, type_=kind, code=refusal.value, param=param).body()


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; answered by `send_400_response`."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


HEAD_WITH_BODY_MAX = 64 * 1024  # a first body write up to this size goes with the head


class _HeadWithBody:
    """The transport as one answer sees it until its first body write: the head is held, then
    written with that body (one write), or alone at the loop's next turn; then the answer's
    cycle gets the transport itself back."""

    __slots__ = ("_cycle", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self._transport = transport
        self._cycle = cycle
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:  # the head: held for the body's first bytes
            self._held = data
            asyncio.get_running_loop().call_soon(self._flush)
            return
        self._cycle.transport = self._transport
        held, self._held = self._held, b""
        if len(data) > HEAD_WITH_BODY_MAX:  # a large body is not copied to save one write
            self._transport.write(held)
            self._transport.write(data)
        else:
            self._transport.write(held + data)

    def _flush(self) -> None:
        if self._held:
            self._cycle.transport = self._transport
            held, self._held = self._held, b""
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...
        return getattr(self._transport, name)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol with head and body limits, a connection cap and one Authorization."""

    max_header_bytes = 32 * 1024
    header_timeout_s = 10.0
    body_timeout_s = 60.0
    max_connections = 512
    error_body: ErrorBody = staticmethod(openai_body)
    head_with_body = False  # an answer's head written with its first body bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # reading a request head (no request yet, or between requests)
        self._in_body = False  # the head is read, its body is not complete
        self._head_bytes = 0
        self._timer: asyncio.TimerHandle | None = None  # the head's timeout or the body's
        self._refused: _Refused | None = None
        self._lost = False  # the client has hung up
        # The app's callback for when the client hangs up, and the request cycle it watches
        # for: one at a time (uvicorn runs a connection's requests one after another).
        self._gone: Callable[[], None] | None = None
        self._gone_cycle: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._in_head = False
            self._refuse(
                Refusal.TOO_MANY_CONNECTIONS,
                f"more than {self.max_connections} open connections; retry shortly",
                extra=b"retry-after: 1\r\n",
            )
            return
        self._arm(self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
        self._lost = True
        gone, self._gone = self._gone, None
        if gone is not None and not self._gone_cycle.response_complete:
            self.loop.call_soon(gone)  # as a `receive()` waiting would hear it: not in here

    def _watch_gone(self, request: weakref.ref[Any], callback: Callable[[], None] | None) -> None:
        """`scope[GONE]` of one request (`request`: a weak reference to its uvicorn cycle):
        call `callback` when the client hangs up before that request's answer is complete
        (None: stop). Reading is resumed, as a `receive()` would, so the hang-up is seen. A
        client that already left (while the request waited in a slot's queue, say) is told at
        once, as a `receive()` would say `http.disconnect` at once.

        Keyed by the request: uvicorn starts a pipelined request's app from inside the answer's
        last `send` of the one before, so that app may watch before the one before stops (it
        still awaits something after its answer); that late stop clears nothing of the newer
        request's, and a hang-up then is the newer request's alone. The request is held by a
        weak reference: the scope holding this watch belongs to that request, and a strong one
        would make every request a reference cycle (garbage only the cyclic collector frees:
        one collection every ~50 requests)."""
        cycle = request()
        if cycle is None:  # that request's cycle is gone: nothing of it to watch
            return
        if callback is None:
            if self._gone_cycle is cycle:
                self._gone = self._gone_cycle = None
            return
        if self._lost:
            if not cycle.response_complete:
                self.loop.call_soon(callback)
            return
        self._gone, self._gone_cycle = callback, cycle
        if self.flow is not None:
            self.flow.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            if self._timer is None:
                self._arm(self.header_timeout_s)  # the first bytes of the next request
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_header_bytes:
            self._refuse(
                Refusal.HEAD_TOO_LARGE, f"request head larger than {self.max_header_bytes} bytes"
            )
        elif self._in_body and self._timer is None:
            self._arm(self.body_timeout_s)  # the body did not come with its head

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        if sum(name == header.AUTHORIZATION for name, _ in self.headers) > 1:
            self._refused = _Refused(
                Refusal.AMBIGUOUS_CREDENTIALS,
                "more than one Authorization header; send exactly one",
            )
            raise self._refused  # the parser stops; uvicorn calls send_400_response
        self._in_body = True
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope:
            return  # no request cycle of its own (a WebSocket upgrade)
        watch = functools.partial(self._watch_gone, weakref.ref(cycle))
        self.scope[GONE] = watch  # type: ignore[literal-required]
        if self.head_with_body:
            cycle.transport = _HeadWithBody(self.transport, cycle)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._in_body = True, False
        self._head_bytes = 0
        self._disarm()

    def send_400_response(self, msg: str) -> None:
        """A head uvicorn cannot parse, or one a callback refused: the port's error body."""
        refused, self._refused = self._refused, None
        if refused is not None:
            self._refuse(refused.refusal, str(refused))
        else:
            self._refuse(Refusal.MALFORMED, msg)

    def _arm(self, delay: float) -> None:
        self._timer = self.loop.call_later(delay, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._in_head:
            self._refuse(
                Refusal.HEAD_TIMEOUT, f"no complete request head within {self.header_timeout_s:g}s"
            )
        elif self._in_body:
            if self.flow.read_paused:  # the app has not taken what was read: not the client's
                self._arm(self.body_timeout_s)
                return
            self._refuse(
                Refusal.BODY_TIMEOUT,
                f"request body not complete within {self.body_timeout_s:g}s of its head",
            )

    def _refuse(self, refusal: Refusal, message: str, *, extra: bytes = b"") -> None:
        """Answer with the port's JSON error body and close (no app, no auth); only close when
        the app has already answered this request."""
        self._disarm()
        if self.transport.is_closing():
            return
        if self._in_body and self.cycle is not None and self.cycle.response_started:
            self.transport.close()
            return
        body = self.error_body(refusal, message)
        status = refusal.status
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n%s\r\n%s" % (status, REASONS[status], len(body), extra, body)
        )
        self.transport.close()


def protocol(
    *,
    max_header_bytes: int,
    header_timeout_s: float,
    body_timeout_s: float,
    max_connections: int,
    error_body: ErrorBody = openai_body,
    head_with_body: bool = False,
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for one port (uvicorn's `Config(http=...)`)."""
    attrs = {
        "max_header_bytes": max_header_bytes,
        "header_timeout_s": header_timeout_s,
        "body_timeout_s": body_timeout_s,
        "max_connections": max_connections,
        "error_body": staticmethod(error_body),
        "head_with_body": head_with_body,
    }
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), attrs)

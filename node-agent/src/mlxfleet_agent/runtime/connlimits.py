"""Connection limits of both ports, enforced before a request is parsed or authenticated.

uvicorn's httptools protocol bounds neither the size of a request head nor the time a client
may take to send it (its keep-alive timer only runs between requests, and `limit_concurrency`
answers 503 only once a head is complete), so a client could grow the agent by sending endless
headers or hold sockets open without a word. `protocol(...)` returns the httptools protocol with:

- a header size limit: a request head (request line + headers) longer than `max_header_bytes`
  is answered 431 and the connection closed; what is buffered stays within the limit plus one
  socket read (256 KiB);
- a header-read timeout: a connection that has not sent a whole head `header_timeout_s` after it
  opened (or after the first byte of its next request) is answered 408 and closed;
- a connection cap: a connection beyond `max_connections` open ones is answered 503 with
  `Retry-After` and closed at once.

May import: uvicorn, the standard library. Called by: runtime.serve (both ports' servers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

ErrorBody = Callable[[int, str], bytes]
"""(status, message) -> the JSON error body of the port (OpenAI-shaped or the control API's)."""

REASONS = {
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol with a header size limit, a header-read timeout and a connection cap."""

    max_header_bytes = 32 * 1024
    header_timeout_s = 10.0
    max_connections = 512
    error_body: ErrorBody = staticmethod(lambda status, message: b"{}")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # reading a request head (no request yet, or between requests)
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._in_head = False
            self._refuse(
                503,
                f"more than {self.max_connections} open connections; retry shortly",
                extra=b"retry-after: 1\r\n",
            )
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            if self._head_timer is None:
                self._arm()  # the first bytes of the next request on a kept-alive connection
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_header_bytes:
            self._refuse(431, f"request head larger than {self.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head:
            self._refuse(408, f"no complete request head within {self.header_timeout_s:g}s")

    def _refuse(self, status: int, message: str, *, extra: bytes = b"") -> None:
        """Answer `status` with the port's JSON error body and close (no app, no auth)."""
        self._disarm()
        if self.transport.is_closing():
            return
        body = self.error_body(status, message)
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n%s\r\n%s" % (status, REASONS[status], len(body), extra, body)
        )
        self.transport.close()


def protocol(
    *,
    max_header_bytes: int,
    header_timeout_s: float,
    max_connections: int,
    error_body: ErrorBody,
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for one port (uvicorn's `Config(http=...)`)."""
    attrs = {
        "max_header_bytes": max_header_bytes,
        "header_timeout_s": header_timeout_s,
        "max_connections": max_connections,
        "error_body": staticmethod(error_body),
    }
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), attrs)

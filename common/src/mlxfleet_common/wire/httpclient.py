"""A keep-alive HTTP/1.1 client for proxying to OpenAI-compatible upstreams, on httptools.

Built for a reverse proxy's hot path: one `asyncio.Protocol` per connection, llhttp (through
httptools' `HttpResponseParser`) for the response head and body framing (chunked, content-length
and close-delimited bodies, HTTP/1.0 and 1.1), body chunks handed over as they arrive (several
coalesced when the reader runs behind), reading paused while too much is buffered. Idle
connections are pooled per origin and reused (LIFO); a body can also be forwarded chunk by
chunk from the connection's own callback (`Response.forward`: no task wakes per chunk, the hot
path of a streaming proxy). A request that fails on a reused connection
before any byte of the answer is sent again once on a fresh one (the server closed an idle
connection: nothing was processed).

Errors say how far the exchange got, so a caller can decide what is safe to retry:
`ConnectError` (no connection), `ResponseError.before_response` (connected, nothing read back).

Shared by the agent and the gateway (the one HTTP client of the product's data plane).
May import: the standard library and httptools only (no other mlxfleet module).
Called by: the agent's `dataplane.upstream` (to its backends), the gateway's proxy and relay (to
agents and external providers), `healthcheck` (liveness probes over one kept-alive connection).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import httptools

HIGH_WATER = 1 << 20  # pause reading the upstream above this many buffered body bytes
LOW_WATER = 1 << 16
MAX_HEAD = 64 * 1024  # largest response head accepted


class UpstreamError(Exception):
    """An exchange with an upstream failed. `before_response`: no byte of an answer was read,
    so the request may be sent elsewhere."""

    before_response = True


class ConnectError(UpstreamError):
    """No connection: refused, unreachable, or the connect timed out."""


class ResponseError(UpstreamError):
    """The connection broke, timed out or sent something that is not HTTP."""

    def __init__(self, message: str, *, before_response: bool, by_peer: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response
        self.by_peer = by_peer  # the upstream closed or reset the connection


@dataclass(frozen=True, slots=True)
class Origin:
    """Where to connect: `host:port`, plain or TLS (`tls` holds the context to use)."""

    host: str
    port: int
    tls: ssl.SSLContext | None = field(default=None, compare=False, hash=False)
    scheme: str = "http"

    @classmethod
    def from_url(cls, url: str, *, tls: ssl.SSLContext | None = None) -> tuple[Origin, str]:
        """(origin, base path) of `http(s)://host[:port][/path]`; https uses `tls` or defaults."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL with a host")
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        context = (tls or ssl.create_default_context()) if secure else None
        host = parts.hostname
        return cls(host, port, context, parts.scheme), parts.path.rstrip("/")

    @property
    def authority(self) -> bytes:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port == default else f"{host}:{self.port}").encode("ascii")

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


class Response:
    """One answer: status and headers at once, the body as it arrives (`read_chunk`), or handed
    to a callback as it arrives (`forward`).

    Read the body to its end (b"" from `read_chunk`, or `forward`'s future) and `close()` for
    the connection to go back to the pool; `close()` anything abandoned (the connection is
    closed, never reused half-read).
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_done",
        "_ended",
        "_error",
        "_sink",
        "_waiter",
        "created",
        "headers",
        "heard",
        "status",
    )

    def __init__(self, conn: _Connection) -> None:
        self._conn: _Connection | None = conn
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._done = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[bytes], None] | None = None
        self._ended: asyncio.Future[None] | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.created = time.monotonic()
        self.heard = 0.0  # when body bytes last arrived (0: none yet)

    def header(self, name: bytes) -> bytes | None:
        """The first header called `name` (lower case), if any."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def complete(self) -> bool:
        """The whole body has been read."""
        return self._done and not self._chunks

    @property
    def arrived(self) -> bool:
        """The whole body is here (read or buffered): reading the rest waits for nothing."""
        return self._done

    async def read_chunk(self) -> bytes:
        """The next body bytes (everything buffered so far), b"" at the end; raises
        ResponseError when the body broke off."""
        while not self._chunks:
            if self._done:
                self._release()
                return b""
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if self._buffered > HIGH_WATER and self._conn is not None:
            self._conn.resume()
        self._buffered = 0
        return data

    async def read(self, limit: int) -> bytes:
        """The whole body; ResponseError when it exceeds `limit` bytes."""
        parts: list[bytes] = []
        size = 0
        while chunk := await self.read_chunk():
            size += len(chunk)
            if size > limit:
                self.close()
                raise ResponseError(f"answer exceeds {limit} bytes", before_response=False)
            parts.append(chunk)
        return b"".join(parts)

    def forward(self, sink: Callable[[bytes], None]) -> asyncio.Future[None]:
        """From now on hand each body chunk to `sink` as it arrives, called from the
        connection's `data_received` (no task is woken per chunk); what was buffered goes to
        `sink` at once. The future ends with the body (None) or with the ResponseError that
        broke it off. `sink` must not raise; it may `pause_reading()` (backpressure) and
        `abort()`. Call `close()` afterwards, as with `read_chunk`."""
        ended = asyncio.get_running_loop().create_future()
        self._ended = ended
        if self._chunks:
            data = b"".join(self._chunks)
            self._chunks.clear()
            if self._buffered > HIGH_WATER and self._conn is not None:
                self._conn.resume()
            self._buffered = 0
            sink(data)
        self._sink = sink
        if self._done:
            ended.set_result(None)
        elif self._error is not None:
            ended.set_exception(self._error)
        return ended

    def pause_reading(self) -> None:
        """Stop reading the upstream (the consumer cannot keep up); `resume_reading` undoes."""
        if self._conn is not None:
            self._conn.pause()

    def resume_reading(self) -> None:
        if self._conn is not None:
            self._conn.resume()

    def abort(self, reason: str = "aborted") -> None:
        """Cut the exchange now (from anywhere): a reader gets ResponseError(reason)."""
        conn = self._conn
        if conn is not None and not self._done:
            conn.abort(reason)

    def close(self) -> None:
        """Give up on the rest of the body: the connection is closed (not reused)."""
        conn, self._conn = self._conn, None
        if conn is not None and not self._done:
            conn.abort()
        elif conn is not None:
            conn.release()

    # ---- called by the connection ----------------------------------------------------------

    @property
    def idle_since(self) -> float:
        """When the exchange last made progress (sent, or bytes arrived)."""
        return self.heard or self.created

    def _feed(self, data: bytes) -> None:
        self.heard = time.monotonic()
        sink = self._sink
        if sink is not None:
            sink(data)
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER and self._conn is not None:
            self._conn.pause()
        self._wake()

    def _finish(self) -> None:
        self._done = True
        ended = self._ended
        if ended is not None and not ended.done():
            ended.set_result(None)
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if not self._done:
            self._error = error
            ended = self._ended
            if ended is not None and not ended.done():
                ended.set_exception(error)
        self._wake()

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.release()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, one request at a time, parsed by httptools."""

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.head: asyncio.Future[Response] | None = None
        self.closed = False
        self.reused = False
        self.paused = False
        self.idle_since = 0.0
        self.got_bytes = False
        self.close_delimited = False
        self.keep_alive = True
        self.head_size = 0
        self._length_known = False
        self._chunked = False

    # ---- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.response is None:  # bytes while idle: the server broke the protocol
            self.abort()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._error(ResponseError(f"invalid HTTP answer: {exc}", before_response=False))
            self.abort()

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self.response
        if response is None:
            return
        if response.status and self.close_delimited:
            response._finish()  # body ends at EOF
            self.response = None
            return
        what = f"{type(exc).__name__}: {exc}" if exc else "connection closed by the upstream"
        self._error(ResponseError(what, before_response=not self.got_bytes, by_peer=True))

    def pause_writing(self) -> None:  # flow control of our writes: requests are small
        return None

    def resume_writing(self) -> None:
        return None

    # ---- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.head_size = 0
        self._length_known = self._chunked = False

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self.response
        if response is None:
            return
        self.head_size += len(name) + len(value)
        if self.head_size > MAX_HEAD:
            raise httptools.HttpParserError("response head too large")
        name = name.lower()
        if name == b"content-length":
            self._length_known = True
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            self._chunked = True
        response.headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # interim answer: wait for the real one
            response.headers.clear()
            return
        response.status = status
        bodiless = status in (204, 304)
        self.close_delimited = not (self._length_known or self._chunked or bodiless)
        head = self.head
        if head is not None and not head.done():
            head.set_result(response)

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is not None and response.status:
            response._feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        if response is None or not response.status:
            return
        self.keep_alive = self.parser.should_keep_alive() and not self.close_delimited
        self.response = None
        response._finish()

    # ---- used by Pool and Response ----------------------------------------------------------

    def send(self, data: bytes, response: Response) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.response = response
        self.got_bytes = False
        self.close_delimited = False
        self.head = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.head

    def _error(self, error: UpstreamError) -> None:
        response, self.response = self.response, None
        head = self.head
        if head is not None and not head.done():
            head.set_exception(error)
        if response is not None:
            response._fail(error)

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def abort(self, reason: str = "aborted") -> None:
        self.closed = True
        self._error(ResponseError(reason, before_response=not self.got_bytes))
        if self.transport is not None:
            self.transport.abort()

    def release(self) -> None:
        """The answer was read to its end: back to the pool, or closed."""
        self.resume()
        if self.closed or not self.keep_alive or self.response is not None:
            self.abort()
            return
        self.pool._put(self)


def _too_late(head: asyncio.Future[Response]) -> None:
    if not head.done():
        head.set_exception(TimeoutError())


class Pool:
    """Connections per origin, reused while idle for less than `idle_timeout_s`.

    `connect_timeout_s` bounds the TCP (+TLS) handshake; keep it short for a LAN (a dead host
    should cost well under a second). `max_idle` idle connections are kept per origin.
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = 1.0,
        idle_timeout_s: float = 20.0,
        max_idle: int = 64,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._closed = False
        self.connects = 0  # connections opened (diagnostics, tests)

    async def request(
        self,
        origin: Origin,
        method: bytes,
        path: bytes,
        *,
        headers: Sequence[tuple[bytes, bytes]] = (),
        body: bytes = b"",
        connect_timeout_s: float | None = None,
        head_timeout_s: float | None = None,
        track: Callable[[Response], None] | None = None,
    ) -> Response:
        """Send one request; return once the status line and headers arrived.

        Raises ConnectError (nothing sent) or ResponseError (`before_response` when no byte of
        an answer came back). `head_timeout_s` bounds the wait for the head (None: no bound).
        `track` receives the Response as soon as the request is sent, so a caller can
        `abort()` it from elsewhere (for example when the upstream is found dead).
        """
        lines = [method, b" ", path, b" HTTP/1.1\r\nHost: ", origin.authority, b"\r\n"]
        for name, value in headers:
            lines += [name, b": ", value, b"\r\n"]
        if body or method == b"POST":
            lines += [b"Content-Length: ", str(len(body)).encode(), b"\r\n"]
        lines += [b"\r\n", body]
        data = b"".join(lines)
        conn = self._take(origin)
        if conn is not None:
            try:
                return await self._exchange(conn, data, head_timeout_s, track)
            except ResponseError as exc:
                if not (exc.before_response and exc.by_peer):
                    raise
                # the server closed the idle connection under us: nothing was processed
        conn = await self._connect(origin, connect_timeout_s)
        return await self._exchange(conn, data, head_timeout_s, track)

    async def _exchange(
        self,
        conn: _Connection,
        data: bytes,
        head_timeout_s: float | None,
        track: Callable[[Response], None] | None,
    ) -> Response:
        response = Response(conn)
        head = conn.send(data, response)
        if track is not None:
            track(response)
        # the bound is a timer on the head's own future, not `asyncio.wait_for` (a waiter
        # future, a callback and a partial per request): a late head fails it with TimeoutError
        timer = (
            None
            if head_timeout_s is None
            else asyncio.get_running_loop().call_later(head_timeout_s, _too_late, head)
        )
        try:
            return await head
        except TimeoutError:
            conn.abort()
            raise ResponseError(
                f"no answer within {head_timeout_s:.1f}s", before_response=True
            ) from None
        except BaseException:
            conn.abort()
            raise
        finally:
            if timer is not None:
                timer.cancel()

    async def _connect(self, origin: Origin, timeout_s: float | None) -> _Connection:
        if self._closed:
            raise ConnectError("pool closed")
        loop = asyncio.get_running_loop()
        timeout = self.connect_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, origin),
                    origin.host,
                    origin.port,
                    ssl=origin.tls,
                    server_hostname=origin.host if origin.tls is not None else None,
                )
        except TimeoutError:
            raise ConnectError(
                f"connect to {origin.host}:{origin.port} timed out after {timeout:.2f}s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(
                f"connect to {origin.host}:{origin.port}: {type(exc).__name__}: {exc}"
            ) from exc
        self.connects += 1
        return conn

    def _take(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin.key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.closed or now - conn.idle_since > self.idle_timeout_s:
                conn.abort()
                continue
            conn.reused = True
            return conn
        return None

    def _put(self, conn: _Connection) -> None:
        idle = self._idle.setdefault(conn.origin.key, [])
        if self._closed or len(idle) >= self.max_idle:
            conn.abort()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def drop(self, origin: Origin) -> None:
        """Close the idle connections to `origin` (it was found dead)."""
        for conn in self._idle.pop(origin.key, []):
            conn.abort()

    def idle_count(self, origin: Origin) -> int:
        return len(self._idle.get(origin.key, []))

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.abort()
        self._idle.clear()

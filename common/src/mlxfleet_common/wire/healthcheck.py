"""Liveness probes over one kept-alive HTTP/1.1 connection, driven by callbacks (no task or
future per check), parsed by httptools like the rest of `httpclient`.

Shared like `httpclient`. May import: the standard library, httptools,
httpclient (`Origin`). Called by: the gateway's health prober (agents' `/healthz`, several times
a second), the agent's backend health watch (`backends.readiness.watch_health`: mlx_lm's
`/health`, an HTTP/1.0 answer whose body ends when the server closes).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

import httptools

from mlxfleet_common.wire.httpclient import Origin


class HealthCheck:
    """Repeated `GET <path>` to one origin over one kept-alive connection, driven by callbacks
    (no task or future per check): a liveness probe several times a second costs a write, a read
    and a few parser callbacks.

    `fire()` sends one check unless one is in flight; `on_result(ok, why)` is called exactly once
    per fired check: True for a 200 answer within `timeout_s`, False (with the reason) for
    anything else. A broken connection is replaced at the next `fire()`. `status` is the
    status code of the fired check's answer (0 while none came), so a caller can tell a server
    that said no from one that did not answer. An answer whose body ends when the server closes
    the connection (HTTP/1.0 without a length) counts when it closes.
    """

    def __init__(
        self,
        origin: Origin,
        path: str,
        *,
        timeout_s: float,
        on_result: Callable[[bool, str], None],
    ) -> None:
        self.origin = origin
        self.request = b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path.encode(), origin.authority)
        self.timeout_s = timeout_s
        self.on_result = on_result
        self.pending = False
        self._transport: asyncio.Transport | None = None
        self._protocol: _HealthProtocol | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._timer: asyncio.TimerHandle | None = None
        self._connecting: asyncio.Task[None] | None = None
        self.status = 0

    def fire(self) -> None:
        if self.pending:
            return
        self.pending = True
        self.status = 0
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.timeout_s, self._expire)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(self.request)
        else:
            self._connecting = loop.create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.create_connection(
                lambda: _HealthProtocol(self),
                self.origin.host,
                self.origin.port,
                ssl=self.origin.tls,
                server_hostname=self.origin.host if self.origin.tls is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:
            self._done(False, f"connect: {type(exc).__name__}: {exc}")
            return
        if not self.pending:  # expired while connecting
            transport.close()
            return
        self._transport, self._protocol = transport, protocol
        self._parser = httptools.HttpResponseParser(self)
        transport.write(self.request)

    def _expire(self) -> None:
        self._timer = None
        self._drop()
        self._done(False, f"no answer within {self.timeout_s:.2f}s")

    def _drop(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._transport is not None:
            self._transport.abort()
        self._transport = self._protocol = None

    def _done(self, ok: bool, why: str) -> None:
        if not self.pending:
            return
        self.pending = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.on_result(ok, why)

    def close(self) -> None:
        self.pending = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._drop()

    # ---- the connection and parser call these --------------------------------------------

    def _data(self, protocol: _HealthProtocol, data: bytes) -> None:
        if protocol is not self._protocol:
            return  # a connection already given up
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._drop()
            self._done(False, f"invalid HTTP answer: {exc}")

    def _lost(self, protocol: _HealthProtocol, exc: Exception | None) -> None:
        if protocol is not self._protocol:
            return
        self._transport = self._protocol = None
        if exc is None and self.status >= 200:  # a body that ends at EOF (HTTP/1.0, no length)
            self._done(self.status == 200, f"answered {self.status}")
            return
        self._done(False, f"connection lost: {exc or 'closed by the upstream'}")

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            self.status = 0
            return
        keep = self._parser.should_keep_alive()
        self._done(self.status == 200, f"answered {self.status}")
        if not keep:
            self._drop()


class _HealthProtocol(asyncio.Protocol):
    __slots__ = ("check",)

    def __init__(self, check: HealthCheck) -> None:
        self.check = check

    def data_received(self, data: bytes) -> None:
        self.check._data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.check._lost(self, exc)

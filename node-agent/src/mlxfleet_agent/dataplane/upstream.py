"""The upstream client of the data plane: one request to a backend, its answer read straight off
the socket.

mlx_lm.server speaks HTTP/1.0 and closes every connection, so there is nothing to pool: a plain
asyncio stream per request is both the simplest and the cheapest client (see `BackendReply`).
May import: the standard library. Called by: dataplane.relay.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0  # longest silence of a backend within one answer
CHUNK = 65536
LIMIT = 1 << 20  # largest response head we accept from a backend


class BackendError(Exception):
    """The backend could not be reached, or broke (or fell silent) while answering."""


class BackendReply:
    """A backend's answer read straight off its socket.

    mlx_lm.server speaks HTTP/1.0: one connection per request, closed after the answer; the body
    of a stream ends at EOF, a non-streamed body has a Content-Length. There is nothing to pool
    or keep alive, so a plain asyncio stream is both the simplest and the cheapest client: each
    chunk is forwarded as the socket hands it over (coalesced when the agent runs behind).
    """

    __slots__ = ("_length", "_reader", "_writer", "content_type", "status")

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        status: int,
        content_type: bytes | None,
        length: int | None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._length = length
        self.status = status
        self.content_type = content_type

    async def chunks(self, *, idle_timeout_s: float = READ_TIMEOUT_S) -> AsyncGenerator[bytes]:
        """The body as it arrives; a backend silent for `idle_timeout_s` is cut off (an error).

        The idle check is a timer that looks at the time of the last chunk now and then, not a
        timeout per read: per-chunk cost stays an attribute store.
        """
        loop = asyncio.get_running_loop()
        read = self._reader.read
        last = [loop.time()]
        idle = [False]

        def check() -> None:
            if loop.time() - last[0] > idle_timeout_s:
                idle[0] = True
                self._writer.transport.abort()
            else:
                timer[0] = loop.call_later(idle_timeout_s / 4, check)

        timer = [loop.call_later(idle_timeout_s / 4, check)]
        try:
            while True:
                try:
                    chunk = await read(CHUNK)
                except OSError as exc:
                    raise BackendError(f"{type(exc).__name__}: {exc}") from exc
                if idle[0]:
                    raise BackendError(f"backend silent for {idle_timeout_s:.0f}s")
                if not chunk:
                    return
                last[0] = loop.time()
                yield chunk
        finally:
            timer[0].cancel()

    async def read_all(self, *, limit: int | None = None) -> bytes:
        """The whole body (at most `limit` bytes of it when given)."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                if self._length is not None and (limit is None or self._length <= limit):
                    return await self._reader.readexactly(self._length)
                if limit is None:
                    return await self._reader.read()
                data = b""
                while len(data) < limit and (chunk := await self._reader.read(limit - len(data))):
                    data += chunk
                return data
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self._writer.close()

    def abort(self) -> None:
        """Drop the connection now (the client left): a pending read ends, mlx_lm's next write
        fails and it stops generating."""
        self._writer.transport.abort()


async def call_backend(port: int, path: str, body: bytes) -> BackendReply:
    """POST `body` (JSON) to the backend on 127.0.0.1:`port`; return once its headers arrived."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=LIMIT)
    except (OSError, TimeoutError) as exc:
        raise BackendError(f"{type(exc).__name__}: {exc}") from exc
    try:
        writer.write(head + body)
        async with asyncio.timeout(READ_TIMEOUT_S):
            raw = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        content_type = None
        length = None
        for line in lines:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            if key == "content-type":
                content_type = value.strip().encode("latin-1")
            elif key == "content-length":
                length = int(value.strip())
    except (
        OSError,
        TimeoutError,
        ValueError,
        IndexError,
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
    ) as exc:
        writer.close()
        raise BackendError(f"{type(exc).__name__}: {exc}") from exc
    except asyncio.CancelledError:  # shutdown while waiting for the head: stop the backend too
        writer.transport.abort()
        raise
    return BackendReply(reader, writer, status=status, content_type=content_type, length=length)

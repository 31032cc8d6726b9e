"""The upstream client of the data plane: one request to a backend on loopback, its answer as it
arrives.

Built on the product's one HTTP client (`mlxfleet_common.wire.httpclient`, shared with the gateway):
llhttp parses the head and the body framing (chunked, content-length, close-delimited; HTTP/1.0
and 1.1), so an engine that answers with chunked encoding is relayed as its body, not its chunk
framing, and one that keeps connections alive has them reused (one pool per event loop).
mlx_lm.server answers HTTP/1.0 and closes: nothing to reuse there, and nothing lost.
May import: the standard library, `mlxfleet_common.wire.httpclient`. Called by: dataplane.relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncGenerator, Iterator

from mlxfleet_common.wire import httpclient

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0  # longest silence of a backend within one answer
_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpclient.Pool] = (
    weakref.WeakKeyDictionary()
)


BackendError = httpclient.UpstreamError
"""The backend could not be reached, or broke (or fell silent) while answering."""


def _pool() -> httpclient.Pool:
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = httpclient.Pool(connect_timeout_s=CONNECT_TIMEOUT_S)
    return pool


class BackendReply:
    """A backend's answer: status and content type at once, the body as it arrives (several
    chunks coalesced when the agent runs behind).

    `read_chunk()` is the HTTP client's own (b"" at the end, BackendError when the body broke
    off): a relay loop pays one await per chunk and nothing else. Silence is bounded per read
    loop, not per read: `watchdog()` arms one timer that looks at the time of the last chunk now
    and then and cuts a backend silent for `idle_timeout_s`.
    """

    __slots__ = ("_resp", "content_type", "read_chunk", "response", "status")

    def __init__(self, resp: httpclient.Response) -> None:
        self._resp = self.response = resp  # `response`: to forward its body from the callback
        self.status = resp.status
        self.content_type = resp.header(b"content-type")
        self.read_chunk = resp.read_chunk

    @contextlib.contextmanager
    def watchdog(self, idle_timeout_s: float = READ_TIMEOUT_S) -> Iterator[None]:
        """While inside, a backend silent for `idle_timeout_s` is cut off (reads then fail)."""
        loop = asyncio.get_running_loop()
        resp = self._resp
        timer: asyncio.TimerHandle | None = None

        def check() -> None:
            nonlocal timer
            if time.monotonic() - resp.idle_since > idle_timeout_s:
                resp.abort(f"backend silent for {idle_timeout_s:.0f}s")
            else:
                timer = loop.call_later(idle_timeout_s / 4, check)

        timer = loop.call_later(idle_timeout_s / 4, check)
        try:
            yield
        finally:
            timer.cancel()

    async def chunks(self, *, idle_timeout_s: float = READ_TIMEOUT_S) -> AsyncGenerator[bytes]:
        """The body as it arrives, under `watchdog(idle_timeout_s)`."""
        with self.watchdog(idle_timeout_s):
            while chunk := await self.read_chunk():
                yield chunk

    async def read_all(self, *, limit: int | None = None) -> bytes:
        """The whole body (its first `limit` bytes when given: the rest is dropped), within
        `READ_TIMEOUT_S` (no timer when it has all arrived already: a short answer often comes
        with its head)."""
        if self._resp.arrived:
            return await self._read_all(limit)
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                return await self._read_all(limit)
        except TimeoutError:
            raise httpclient.ResponseError(
                f"backend silent for {READ_TIMEOUT_S:.0f}s", before_response=False
            ) from None

    async def _read_all(self, limit: int | None) -> bytes:
        parts: list[bytes] = []
        size = 0
        while chunk := await self._resp.read_chunk():
            parts.append(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                self._resp.close()
                return b"".join(parts)[:limit]
        return b"".join(parts)

    def close(self) -> None:
        """Done with it: a fully read answer gives its connection back, anything else drops it."""
        self._resp.close()

    def abort(self) -> None:
        """Drop the connection now (the client left): a pending read ends, the backend's next
        write fails and it stops generating."""
        self._resp.abort("client gone")


async def call_backend(port: int, path: str, body: bytes) -> BackendReply:
    """POST `body` (JSON) to the backend on 127.0.0.1:`port`; return once its headers arrived
    (BackendError when it cannot be reached or does not answer)."""
    resp = await _pool().request(
        httpclient.Origin("127.0.0.1", port),
        b"POST",
        path.encode(),
        headers=((b"Content-Type", b"application/json"),),
        body=body,
        head_timeout_s=READ_TIMEOUT_S,
    )
    return BackendReply(resp)

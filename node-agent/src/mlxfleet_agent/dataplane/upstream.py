"""The upstream client of the data plane: one request to a backend on loopback, its answer as it
arrives.

Built on the product's one HTTP client (`mlxfleet_agent.httpclient`, shared with the gateway):
llhttp parses the head and the body framing (chunked, content-length, close-delimited; HTTP/1.0
and 1.1), so an engine that answers with chunked encoding is relayed as its body, not its chunk
framing, and one that keeps connections alive has them reused (one pool per event loop).
mlx_lm.server answers HTTP/1.0 and closes: nothing to reuse there, and nothing lost.
May import: the standard library, `httpclient`. Called by: dataplane.relay.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator

from mlxfleet_agent import httpclient

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0  # longest silence of a backend within one answer
_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpclient.Pool] = (
    weakref.WeakKeyDictionary()
)


class BackendError(Exception):
    """The backend could not be reached, or broke (or fell silent) while answering."""


def _pool() -> httpclient.Pool:
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = httpclient.Pool(connect_timeout_s=CONNECT_TIMEOUT_S)
    return pool


class BackendReply:
    """A backend's answer: status and content type at once, the body as it arrives (several
    chunks coalesced when the agent runs behind)."""

    __slots__ = ("_resp", "content_type", "status")

    def __init__(self, resp: httpclient.Response) -> None:
        self._resp = resp
        self.status = resp.status
        self.content_type = resp.header(b"content-type")

    async def chunks(self, *, idle_timeout_s: float = READ_TIMEOUT_S) -> AsyncGenerator[bytes]:
        """The body as it arrives; a backend silent for `idle_timeout_s` is cut off (an error).

        The idle check is a timer that looks at the time of the last chunk now and then, not a
        timeout per read: per-chunk cost stays an attribute store.
        """
        loop = asyncio.get_running_loop()
        resp = self._resp
        read = resp.read_chunk
        last = [loop.time()]

        def check() -> None:
            if loop.time() - last[0] > idle_timeout_s:
                resp.abort(f"backend silent for {idle_timeout_s:.0f}s")
            else:
                timer[0] = loop.call_later(idle_timeout_s / 4, check)

        timer = [loop.call_later(idle_timeout_s / 4, check)]
        try:
            while True:
                try:
                    chunk = await read()
                except httpclient.UpstreamError as exc:
                    raise BackendError(str(exc)) from exc
                if not chunk:
                    return
                last[0] = loop.time()
                yield chunk
        finally:
            timer[0].cancel()

    async def read_all(self, *, limit: int | None = None) -> bytes:
        """The whole body (its first `limit` bytes when given: the rest is dropped)."""
        parts: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                while chunk := await self._resp.read_chunk():
                    parts.append(chunk)
                    size += len(chunk)
                    if limit is not None and size >= limit:
                        self._resp.close()
                        return b"".join(parts)[:limit]
        except (httpclient.UpstreamError, TimeoutError) as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        return b"".join(parts)

    def close(self) -> None:
        """Done with it: a fully read answer gives its connection back, anything else drops it."""
        self._resp.close()

    def abort(self) -> None:
        """Drop the connection now (the client left): a pending read ends, the backend's next
        write fails and it stops generating."""
        self._resp.abort("client gone")


async def call_backend(port: int, path: str, body: bytes) -> BackendReply:
    """POST `body` (JSON) to the backend on 127.0.0.1:`port`; return once its headers arrived."""
    origin = httpclient.Origin("127.0.0.1", port)
    try:
        resp = await _pool().request(
            origin,
            b"POST",
            path.encode(),
            headers=((b"Content-Type", b"application/json"),),
            body=body,
            head_timeout_s=READ_TIMEOUT_S,
        )
    except httpclient.UpstreamError as exc:
        raise BackendError(str(exc)) from exc
    return BackendReply(resp)

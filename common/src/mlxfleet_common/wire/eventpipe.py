"""Forwarding a streamed (server-sent events) answer from the upstream connection straight to
the client: the hot path of both OpenAI-compatible proxies (the agent's data plane and the
gateway).

Once a stream is under way, each body chunk is handled inside the upstream connection's
`data_received` callback (`httpclient.Response.forward`): counted by the `StreamScanner` (whole
events only; a usage event the client did not ask for held back), optionally rewritten, and
written with the ASGI `send`, whose coroutine is driven right there. The request task sleeps
until the body ends instead of being woken once per chunk (a future, a loop callback and a task
step saved per event).

Backpressure: the server's `send` only suspends when the client's socket buffer is full (uvicorn
awaits its drain). The pipe then stops reading the upstream, keeps the suspended `send` and the
chunks already read (at most one read's worth), resumes the `send` when it can go on, and reads
the upstream again once everything is written: nothing is buffered without bound. A `send` that
fails aborts the upstream exchange and is raised by `run`.

May import: the standard library, httpclient, openai_proxy. Called by: the agent's
dataplane.streamed and the gateway's stream relay.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Generator
from types import CoroutineType
from typing import Any, cast

from mlxfleet_common.wire import httpclient
from mlxfleet_common.wire import openai_proxy as asgi

Transform = Callable[[bytes], bytes]
_Step = Generator[Any, None, None]  # a started `send`: a coroutine or an awaitable's iterator


class EventPipe:
    """Forwards the rest of one streamed answer (`run`), counting its events in `scanner`."""

    __slots__ = ("_backlog", "_error", "_flushed", "_held", "_resp", "_send", "feed", "transform")

    def __init__(
        self,
        resp: httpclient.Response,
        send: asgi.Send,
        scanner: asgi.StreamScanner,
        transform: Transform | None = None,
    ) -> None:
        self._resp = resp
        self._send = send
        self.feed = scanner.feed
        self.transform = transform
        self._held: _Step | None = None  # a send waiting for the client's socket to drain
        self._backlog: collections.deque[bytes] = collections.deque()
        self._error: BaseException | None = None
        self._flushed: asyncio.Future[None] | None = None

    async def run(self) -> None:
        """Forward until the body ends, then return once all of it is written. Raises the
        upstream's UpstreamError when the body broke off (after what came before is written),
        or the exception of a failed `send`."""
        ended = self._resp.forward(self._chunk)
        try:
            try:
                await ended
            finally:
                while self._held is not None and self._error is None:
                    self._flushed = asyncio.get_running_loop().create_future()
                    await self._flushed
        except asyncio.CancelledError:
            self._drop()
            raise
        except httpclient.UpstreamError:
            if self._error is None:
                raise
        if self._error is not None:  # our abort broke the body off: the send's failure counts
            raise self._error

    # ---- in the upstream connection's callback ---------------------------------------------

    def _chunk(self, data: bytes) -> None:
        out = self.feed(data)
        if not out or self._error is not None:
            return
        if self.transform is not None:
            out = self.transform(out)
        if self._held is not None:
            self._backlog.append(out)
            return
        self._drive(self._write(out))

    def _write(self, out: bytes) -> _Step:
        step: Any = self._send({"type": "http.response.body", "body": out, "more_body": True})
        if type(step) is not CoroutineType:  # any other awaitable
            step = step.__await__()
        return cast(_Step, step)

    def _drive(self, step: _Step) -> None:
        """Run `send` until it finishes or waits; if it waits, hold it and stop reading."""
        try:
            waited = step.send(None)
        except StopIteration:
            return
        except Exception as exc:  # the client's side failed: stop the upstream too
            self._fail(exc)
            return
        self._held = step
        self._resp.pause_reading()
        if waited is None:  # a bare yield to the loop
            asyncio.get_running_loop().call_soon(self._wake, None)
        else:
            waited._asyncio_future_blocking = False
            waited.add_done_callback(self._wake)

    def _wake(self, _: object) -> None:
        step, self._held = self._held, None
        if step is None:
            return
        self._drive(step)
        backlog = self._backlog
        while self._held is None and backlog and self._error is None:
            self._drive(self._write(backlog.popleft()))
        if self._held is None:
            self._resp.resume_reading()
            flushed = self._flushed
            if flushed is not None and not flushed.done():
                flushed.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._backlog.clear()
        self._resp.abort(f"client write failed: {type(exc).__name__}")
        flushed = self._flushed
        if flushed is not None and not flushed.done():
            flushed.set_result(None)

    def _drop(self) -> None:
        step, self._held = self._held, None
        self._backlog.clear()
        if step is not None:
            step.close()

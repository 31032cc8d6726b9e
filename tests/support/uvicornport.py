"""A product port's protocol (`connlimits`, uvicorn's httptools protocol subclassed) driven
through uvicorn's own parser callbacks with an in-memory transport: no socket, so unit tests of
the port (its limits, head_with_body, the hang-up hook) stay pure and fast, and a uvicorn release
that changes the private interface connlimits relies on fails them loudly. `Pipelined` is an
app for requests pipelined on one connection (here and over a real socket).

May import: uvicorn, mlxfleet_common.wire (connlimits, hangup, openai_proxy), the standard
library. Called by: tests/unit/agent/test_connlimits_uvicorn.py,
tests/unit/common/test_head_with_body.py, tests/unit/common/test_watch_disconnect.py,
tests/integration/agent/test_pipelined_hangup.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from mlxfleet_common.wire import connlimits, hangup, openai_proxy

App = Callable[[Any, Any, Any], Awaitable[None]]
REQUEST = b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"


class Transport(asyncio.Transport):
    """What the protocol writes, each write kept apart, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    @property
    def written(self) -> bytes:
        return b"".join(self.writes)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def read_only(scope: Any, receive: Any, send: Any) -> None:
    """An app that reads and never answers (for tests of what happens before the app)."""
    await receive()


class Pipelined:
    """The app of requests pipelined on one connection, told apart by arrival (uvicorn runs
    them one at a time, in order): request i reads its body, watches for the hang-up once
    `watch[i]` is set (then sets `watching[i]`), answers once `answer[i]` is set, and stops
    watching once `done[i]` is set (an app that still awaits something after its answer's last
    send: an upstream connection to release, a count to settle). `gone[i]` counts the hang-ups
    it heard; `heard[i]` is set at the first."""

    def __init__(self, n: int) -> None:
        self.gone = [0] * n
        self.watch, self.watching, self.answer, self.done, self.heard = (
            [asyncio.Event() for _ in range(n)] for _ in range(5)
        )
        self._arrived = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        i, self._arrived = self._arrived, self._arrived + 1
        await openai_proxy.read_body(scope, receive, limit=1024)
        await self.watch[i].wait()
        unwatch = hangup.watch_disconnect(scope, receive, functools.partial(self._left, i))
        self.watching[i].set()
        try:
            await self.answer[i].wait()
            await openai_proxy.send_json(send, 200, b"{}")
            await self.done[i].wait()
        finally:
            unwatch()

    def _left(self, i: int) -> None:
        self.gone[i] += 1
        self.heard[i].set()


def release(*events: asyncio.Event) -> None:
    for event in events:
        event.set()


@contextlib.contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop of the test's own; what is still running at the end is cancelled."""
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def connect(
    loop: asyncio.AbstractEventLoop,
    app: App = read_only,
    *,
    head_with_body: bool = False,
    open_already: int = 0,
) -> tuple[connlimits.LimitedHttpToolsProtocol, Transport]:
    """A connection to a port (limits: head 1 KiB, 5 s timeouts, 4 connections) serving `app`,
    `open_already` other connections open; its protocol and transport."""
    cls = connlimits.protocol(
        max_header_bytes=1024,
        header_timeout_s=5,
        body_timeout_s=5,
        max_connections=4,
        head_with_body=head_with_body,
    )
    state = ServerState()
    state.connections.update(object() for _ in range(open_already))  # type: ignore[misc]
    config = Config(app=app, http=cls, log_config=None, lifespan="off")
    proto = cls(config=config, server_state=state, app_state={}, _loop=loop)
    transport = Transport()
    proto.connection_made(transport)
    return proto, transport


def turns(loop: asyncio.AbstractEventLoop, n: int = 5) -> None:
    """Let the loop run `n` turns (the app's steps, callbacks it scheduled)."""
    for _ in range(n):
        loop.run_until_complete(asyncio.sleep(0))


def finish(loop: asyncio.AbstractEventLoop) -> None:
    """Run what is still running on `loop` to its end (an error in it is raised here)."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if pending:  # (an empty gather would belong to another loop)
        loop.run_until_complete(asyncio.gather(*pending))

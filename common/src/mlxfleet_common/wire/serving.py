"""The uvicorn server of every port the product serves with uvicorn (the agent's data and control
ports, the gateway's OpenAI port): the program orders its own shutdown, and the server wakes
once a second instead of ten times.

uvicorn's `Server.main_loop` sleeps 0.1 s between ticks to see `should_exit` and, every tenth
tick, to refresh its `Date` header: ten wake-ups a second per port, which an idle agent (two
ports) paid as about a tenth of its CPU. `Server` ticks once a second (the `Date` header keeps
its one-second step) and wakes at once when `should_exit` is set, so a shutdown does not wait
for the tick. Its own signal handling is off: the agent's and the gateway's `serve` catch
SIGINT/SIGTERM and drain in their order.

Shared by the agent and the gateway. May import: uvicorn, the standard library. Called by: the
agent's runtime.serve (both ports), the gateway's server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn

TICK_S = 1.0  # uvicorn's own: 0.1 (its Date header moves once a second either way)


class Server(uvicorn.Server):
    """uvicorn's server with a one-second tick, woken when `should_exit` is set, and without
    its own signal handling."""

    _exit: asyncio.Event | None = None

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._exit is not None:
            self._exit.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        self._exit = asyncio.Event()
        if self._should_exit:
            self._exit.set()
        ticks = 0  # on_tick refreshes the Date header when the count is a multiple of 10
        while not await self.on_tick(ticks):
            ticks = (ticks + 10) % 864000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await self._exit.wait()

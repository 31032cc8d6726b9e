"""The attempts in flight per origin, and what becomes of them when their agent goes silent.

The proxy registers every attempt (`calls.Exchange`) under its origin while it runs. The health
prober reports each agent's probes here: `on_dead` (a probe failed; the agent is already out of
rotation for new requests) moves the attempts still waiting for their first byte once the agent
has been silent for `move_after_s`, and cuts its streams too after `stream_cut_after_s`; a stall
shorter than that (a busy Mac) costs nothing; `on_alive` restarts the count. `last_heard` tells
the prober when an origin last sent answer bytes (an agent answering is not probed). `sweep` cuts
any exchange whose upstream has been silent longer than `read_timeout_s`.
May import: the standard library, calls. Called by: proxy (registers attempts, runs nothing),
server (wires the prober to on_dead/on_alive/last_heard, runs sweep).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from mlxfleet_gateway import calls


class Origins:
    def __init__(
        self,
        *,
        move_after_s: float,
        stream_cut_after_s: float,
        read_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.move_after_s = move_after_s
        self.stream_cut_after_s = stream_cut_after_s
        self.read_timeout_s = read_timeout_s
        self.clock = clock
        self.inflight: dict[str, set[calls.Exchange]] = {}
        self.dead_since: dict[str, float] = {}

    def on_dead(self, origin: str) -> None:
        """An agent stopped answering probes (it is already out of rotation for new requests):
        once it has been silent for `move_after_s`, move the requests still waiting for their
        first byte there; after `stream_cut_after_s`, cut its streams too. A stall shorter than
        that (a busy Mac) costs nothing but a moment out of rotation."""
        now = self.clock()
        silent = now - self.dead_since.setdefault(origin, now)
        if silent < self.move_after_s:
            return
        for exchange in list(self.inflight.get(origin, ())):
            if not exchange.started or silent >= self.stream_cut_after_s:
                exchange.abort("the agent stopped answering")

    def on_alive(self, origin: str) -> None:
        self.dead_since.pop(origin, None)

    def last_heard(self, origin: str) -> float:
        """When an exchange in flight on `origin` last received bytes (0: none in flight)."""
        latest = 0.0
        for exchange in self.inflight.get(origin, ()):
            response = exchange.response
            if response is not None and response.heard > latest:
                latest = response.heard
        return latest

    async def sweep(self, interval_s: float = 5.0) -> None:
        """Cut exchanges whose upstream has been silent longer than read_timeout_s."""
        while True:
            await asyncio.sleep(interval_s)
            edge = time.monotonic() - self.read_timeout_s
            for exchanges in self.inflight.values():
                for ex in list(exchanges):
                    if ex.response is not None and ex.response.idle_since < edge:
                        ex.abort(f"upstream silent for {self.read_timeout_s:.0f}s")
